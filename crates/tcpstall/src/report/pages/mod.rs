//! The HTML pages of the verbs that run on this host (lab, probe), built on the page of
//! [`tcpstall_core::report::html`].

on_linux! {
    mod lab;
    pub(crate) use lab::lab_page;
}
mod probe;
pub use probe::probe_page;
