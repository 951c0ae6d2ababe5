//! A process and its descendants: a server is often a master and workers (nginx, Apache
//! prefork, gunicorn, PostgreSQL, php-fpm), the workers inheriting the listening socket across
//! fork and holding the connections they accept. `sockets` and `fix` look at the whole tree.

use std::collections::HashMap;
use std::fs;

/// `pid` then its descendants, parents before children, each level by pid; tcpstall itself
/// left out (run from the process it inspects, it is one of its children). Read from the
/// parent field of every `/proc/PID/stat`: a child that forks or exits meanwhile is caught or
/// not, as with any listing of /proc.
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
    let me = std::process::id();
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for child in super::procfs::all_pids().unwrap_or_default() {
        if child == me {
            continue;
        }
        if let Some(parent) = parent_of(child) {
            children.entry(parent).or_default().push(child);
        }
    }
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        if let Some(kids) = children.get_mut(&tree[next]) {
            kids.sort_unstable();
            // A pid cannot be its own ancestor, but /proc is read while it changes.
            let fresh: Vec<u32> = kids.iter().copied().filter(|k| !tree.contains(k)).collect();
            tree.extend(fresh);
        }
        next += 1;
    }
    tree
}

/// The parent pid: the fourth field of `/proc/PID/stat`, after the command name in parentheses
/// (which may hold spaces and parentheses: the last ')' ends it).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn finds_children_and_grandchildren() {
        // sh forks sleep (a grandchild of this test); both are in the tree of this process.
        let mut child = Command::new("sh")
            .args(["-c", "sleep 5 & echo started; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh runs");
        let mut line = String::new();
        let stdout = child.stdout.take().expect("piped");
        let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
        let tree = process_tree(std::process::id());
        let sh = child.id();
        let grandchildren: Vec<u32> = tree
            .iter()
            .copied()
            .filter(|&p| parent_of(p) == Some(sh))
            .collect();
        for &sleep in &grandchildren {
            // SAFETY: kill with the pid of our own grandchild and a valid signal.
            unsafe { libc::kill(sleep as i32, libc::SIGKILL) };
        }
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(tree[0], std::process::id());
        assert!(tree.contains(&sh), "{tree:?}");
        assert_eq!(grandchildren.len(), 1, "sleep under sh: {tree:?}");
    }
}
