//! A process and its descendants: a server is often a master and workers (nginx, Apache
//! prefork, gunicorn, PostgreSQL, php-fpm), the workers inheriting the listening socket across
//! fork and holding the connections they accept. `sockets` and `fix` look at the whole tree.

use std::collections::HashMap;
use std::fs;

/// `pid` then its descendants, parents before children, each level by pid; tcpstall itself
/// left out (run from the process it inspects, it is one of its children). A child that forks
/// or exits meanwhile is caught or not, as with any listing of /proc.
pub(crate) fn process_tree(pid: u32) -> Vec<u32> {
    let me = std::process::id();
    let mut tree = vec![pid];
    let mut next = 0;
    let mut by_parent: Option<HashMap<u32, Vec<u32>>> = None;
    while next < tree.len() {
        let parent = tree[next];
        let mut kids = match children_files(parent) {
            Some(kids) => kids,
            // Without CONFIG_PROC_CHILDREN: every process's parent, read once.
            None => by_parent
                .get_or_insert_with(parents_of_all)
                .get(&parent)
                .cloned()
                .unwrap_or_default(),
        };
        kids.sort_unstable();
        // A pid cannot be its own ancestor, but /proc is read while it changes.
        kids.retain(|&k| k != me && !tree.contains(&k));
        kids.dedup();
        tree.extend(kids);
        next += 1;
    }
    tree
}

/// The children of `pid` from `/proc/PID/task/TID/children` (each thread's own children,
/// CONFIG_PROC_CHILDREN); `None` when the kernel has no such files, or when a thread exited
/// while they were read: its children went to another thread of the process (the kernel's
/// `forget_original_parent`), maybe one already read, so only every process's parent field
/// tells them all then.
fn children_files(pid: u32) -> Option<Vec<u32>> {
    let mut kids = Vec::new();
    for tid in super::procfs::thread_ids(pid).ok()? {
        let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")).ok()?;
        kids.extend(
            text.split_whitespace()
                .filter_map(|k| k.parse::<u32>().ok()),
        );
    }
    Some(kids)
}

/// Every process's children, from the parent field of each `/proc/PID/stat`.
fn parents_of_all() -> HashMap<u32, Vec<u32>> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for child in super::procfs::all_pids().unwrap_or_default() {
        if let Some(parent) = parent_of(child) {
            children.entry(parent).or_default().push(child);
        }
    }
    children
}

/// The eldest ancestor of `pid` that holds the socket `inode`, following parents while each
/// holds it: the process that made a listener its children inherited across fork (an nginx
/// or gunicorn master, shown the worker's pid). `None` when `pid`'s parent does not hold it.
pub(crate) fn ancestor_holding(pid: u32, inode: u64) -> Option<u32> {
    let holds =
        |p: u32| super::procfs::socket_fds(p).is_ok_and(|fds| fds.iter().any(|&(_, i)| i == inode));
    let mut eldest = None;
    let mut at = pid;
    // pid 1 and the kernel's threads (parent 0) end the walk; a bound guards a /proc read
    // while it changes.
    for _ in 0..64 {
        match parent_of(at) {
            Some(parent) if parent > 1 && holds(parent) => {
                eldest = Some(parent);
                at = parent;
            }
            _ => break,
        }
    }
    eldest
}

/// The parent pid: the fourth field of `/proc/PID/stat`.
fn parent_of(pid: u32) -> Option<u32> {
    u32::try_from(super::procfs::stat_field(pid, 4)?).ok()
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
        let by_stat = parents_of_all();
        let mut stat_children = by_stat.get(&sh).cloned().unwrap_or_default();
        stat_children.sort_unstable();
        let from_files = children_files(sh).map(|mut kids| {
            kids.sort_unstable();
            kids
        });
        // What each source says of this process's children, before they are killed below.
        let sh_parent = parent_of(sh);
        let my_children_files = children_files(std::process::id());
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
        assert!(
            tree.contains(&sh),
            "sh {sh} not in {tree:?}; its parent {:?}; this process's children by their parent \
             fields {:?}, by the children files {:?}",
            sh_parent,
            by_stat.get(&std::process::id()),
            my_children_files
        );
        assert_eq!(grandchildren.len(), 1, "sleep under sh: {tree:?}");
        if from_files.is_some() {
            assert_eq!(
                from_files,
                Some(stat_children),
                "/proc/PID/task/TID/children agrees with the parents in /proc/PID/stat"
            );
        }
    }
}
