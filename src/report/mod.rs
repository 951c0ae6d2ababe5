//! Rendering results: terminal tables and stable JSON.
