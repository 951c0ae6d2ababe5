//! The TCP flow table: per-connection, per-direction sequence state.
