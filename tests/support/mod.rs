//! What several end-to-end tests share: starting `mnemo serve` and finding its address.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

/// Spawns `command` (a `mnemo serve ...` with `--port 0`), reads its banner and returns the
/// process and its base URL. The rest of its stdout is drained in the background, so the
/// server never blocks on a full pipe.
pub fn spawn_server(command: &mut Command) -> (Child, String) {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let banner = lines.next().expect("a banner").expect("the banner is text");
    std::thread::spawn(move || lines.for_each(drop));
    let url = banner
        .strip_prefix("mnemo listening on ")
        .unwrap_or_else(|| panic!("the banner names the address: {banner}"))
        .to_owned();
    (child, url)
}
