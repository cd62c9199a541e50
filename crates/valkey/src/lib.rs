//! The Valkey cluster layer.
