//! The `ingero_threshold` extension: owns the store, offers it as the processor's
//! [`ThresholdSink`], and answers the agent and admin routes.

use std::any::{Any, TypeId};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use component::api::{ApiListener, ApiRequest, ApiResponse};
use component::config::AuthRef;
use component::middleware::ResponseMiddleware;
use component::{ConfigErrors, ConfigValue, Extension, Host, MetricFamily, StartError};
use ingero_wire::ThresholdSink;
use ingero_wire::view::ViewBoard;

use crate::config::ThresholdExtensionConfig;
use crate::routes::{Routes, Visibility};
use crate::store::ThresholdStore;
use crate::view::{SourceBoard, VIEW_PREFIX};

const CREATED: u8 = 0;
const RUNNING: u8 = 1;
const STOPPED: u8 = 2;

/// The extension instance a host creates from config.
#[derive(Debug)]
pub struct ThresholdExtension {
    config: ThresholdExtensionConfig,
    store: Arc<ThresholdStore>,
    board: Arc<SourceBoard>,
    routes: Arc<Routes>,
    state: AtomicU8,
}

/// Decode and validate `cfg` (`null` = defaults) and build the extension.
pub fn create(cfg: &ConfigValue) -> Result<ThresholdExtension, ConfigErrors> {
    ThresholdExtensionConfig::from_value(cfg).map(ThresholdExtension::new)
}

impl ThresholdExtension {
    /// Build from an already validated config.
    pub fn new(config: ThresholdExtensionConfig) -> Self {
        let store = Arc::new(ThresholdStore::with_max_clusters(config.max_clusters));
        let board = Arc::new(SourceBoard::default());
        ThresholdExtension {
            routes: Arc::new(Routes::with_board(Arc::clone(&store), Arc::clone(&board))),
            store,
            board,
            config,
            state: AtomicU8::new(CREATED),
        }
    }

    pub fn config(&self) -> &ThresholdExtensionConfig {
        &self.config
    }

    /// The store (push-path lookups: [`ThresholdStore::push_headers_for_query`]).
    pub fn store(&self) -> Arc<ThresholdStore> {
        Arc::clone(&self.store)
    }

    /// True between `start` and `shutdown`.
    pub fn is_running(&self) -> bool {
        self.state.load(Ordering::Acquire) == RUNNING
    }

    /// The board processors registered their live-view sources with.
    pub fn view_sources(&self) -> Arc<SourceBoard> {
        Arc::clone(&self.board)
    }

    /// A request to the agent listener (`agent_endpoint`).
    pub fn route_agent(&self, req: &ApiRequest<'_>) -> ApiResponse {
        self.routes.agent(req)
    }

    /// A request to the admin listener (`admin_endpoint`).
    pub fn route_admin(&self, req: &ApiRequest<'_>) -> ApiResponse {
        self.routes.admin(req)
    }

    /// A request to the agent listener from a caller limited to `vis` (out-of-scope
    /// clusters answer as unknown ones).
    pub fn route_agent_scoped(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        self.routes.agent_scoped(req, vis)
    }

    /// A request to the admin listener from a caller limited to `vis`.
    pub fn route_admin_scoped(&self, req: &ApiRequest<'_>, vis: Visibility<'_>) -> ApiResponse {
        self.routes.admin_scoped(req, vis)
    }
}

impl Extension for ThresholdExtension {
    /// Nothing to acquire: the host binds the listeners. Idempotent; allowed after shutdown.
    fn start(&self, _host: &dyn Host) -> Result<(), StartError> {
        self.state.store(RUNNING, Ordering::Release);
        Ok(())
    }

    /// Idempotent. The published state is kept: the processor may still publish, and pushes
    /// still being drained keep receiving the last threshold.
    fn shutdown(&self) {
        self.state.store(STOPPED, Ordering::Release);
    }

    /// The threshold sink the `ingero` processor publishes into, and the board processors
    /// register their live-view sources with (NCCL peer lag, cost of waiting).
    fn provides(&self, interface: TypeId) -> Option<Box<dyn Any + Send + Sync>> {
        component::provide::<Arc<dyn ThresholdSink>>(interface, || self.store())
            .or_else(|| component::provide::<Arc<dyn ViewBoard>>(interface, || self.board.clone()))
    }

    /// The agent listener (threshold reads) and, when `admin_endpoint` is set, the admin
    /// listener (diagnostics).
    fn api_listeners(&self) -> Vec<ApiListener> {
        let routes = self.routes.clone();
        let mut out = vec![ApiListener {
            name: "agent",
            endpoint_key: "agent_endpoint",
            endpoint: self.config.agent_endpoint.clone(),
            max_connections: self.config.max_connections,
            max_connections_per_client: self.config.max_connections_per_client,
            first_byte_timeout: self.config.first_byte_timeout,
            idle_timeout: self.config.idle_timeout,
            allowed_hosts: self.config.allowed_hosts.clone(),
            admin: false,
            public_prefix: None,
            route: Arc::new(move |req, vis| routes.agent_scoped(req, vis)),
        }];
        if !self.config.admin_endpoint.is_empty() {
            let routes = self.routes.clone();
            out.push(ApiListener {
                name: "admin",
                endpoint_key: "admin_endpoint",
                endpoint: self.config.admin_endpoint.clone(),
                max_connections: self.config.max_connections,
                max_connections_per_client: self.config.max_connections_per_client,
                first_byte_timeout: self.config.first_byte_timeout,
                idle_timeout: self.config.idle_timeout,
                allowed_hosts: self.config.allowed_hosts.clone(),
                admin: true,
                public_prefix: Some(VIEW_PREFIX),
                route: Arc::new(move |req, vis| routes.admin_scoped(req, vis)),
            });
        }
        out
    }

    fn auth(&self) -> Option<&AuthRef> {
        self.config.auth.as_ref()
    }

    fn response_middleware(&self) -> Option<Arc<dyn ResponseMiddleware>> {
        let mw: Arc<dyn ResponseMiddleware> = self.store();
        Some(mw)
    }

    fn telemetry(&self, out: &mut Vec<MetricFamily>) {
        self.store.telemetry(out);
        out.push(self.routes.counters().family());
    }
}
