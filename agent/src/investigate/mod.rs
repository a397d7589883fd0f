//! The investigation commands over a store: `query`, `explain`, `merge`, `export`.

pub mod episode;
pub mod explain;
pub mod export;
pub mod merge;
pub mod query;

#[cfg(test)]
pub(crate) mod fixtures;

#[derive(Debug, thiserror::Error)]
pub enum InvestigateError {
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
    #[error("sql: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("refused: {0}")]
    Refused(String),
    #[error("{0}")]
    Input(String),
    #[error("{0}: {1}")]
    Io(String, std::io::Error),
}
