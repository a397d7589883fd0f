pub mod tracegen;
