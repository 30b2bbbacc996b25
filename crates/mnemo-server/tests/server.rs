//! The server's integration tests, one module a file, built as one test binary: each binary
//! links the whole server and engine with their line tables, about 160 MB apiece, and one
//! binary a file filled the disk of a cold CI run.

#[path = "support/browser.rs"]
mod browser;
mod support;

mod api;
mod auth;
mod guard;
mod hardening;
mod sessions;
mod web;
