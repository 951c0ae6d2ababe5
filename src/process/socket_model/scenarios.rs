//! The write-write-read rule and the fd model from scripted events: each scenario is a world
//! (which fd of which process holds which socket, with what options), the events of the traced
//! threads in time order, and the sockets the report would show. No process, no socket.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::*;
use crate::process::events::{Actor, Event, TcpOption};

/// MSS of the scripted sockets unless a scenario says otherwise (Ethernet with timestamps).
const MSS: u64 = 1448;

const MAIN: Actor = Actor {
    tid: 100,
    tgid: 100,
};
/// A second thread of the same process.
const READER: Actor = Actor {
    tid: 101,
    tgid: 100,
};
/// A forked process.
const CHILD: Actor = Actor {
    tid: 200,
    tgid: 200,
};

/// A socket of the world: its inode and options as the kernel would show them.
#[derive(Debug, Clone, Copy)]
struct Sock {
    inode: u64,
    nodelay: bool,
    cork: bool,
    mss: u64,
}

/// A Nagle socket (no option set) with inode `inode`.
const fn nagle(inode: u64) -> Sock {
    Sock {
        inode,
        nodelay: false,
        cork: false,
        mss: MSS,
    }
}

/// The scripted world the model looks at fds in.
#[derive(Default)]
struct World {
    /// (pid, fd) → the socket it holds, `None` for a non-TCP file.
    fds: HashMap<(u32, i32), Option<u64>>,
    /// inode → the socket.
    sockets: HashMap<u64, Sock>,
}

#[derive(Clone, Default)]
struct Scripted(Rc<RefCell<World>>);

impl Inspector for Scripted {
    fn inspect(&mut self, pid: u32, fd: i32) -> Probe {
        let world = self.0.borrow();
        match world.fds.get(&(pid, fd)) {
            None => Probe::Unknown,
            Some(None) => Probe::Other,
            Some(Some(inode)) => {
                let sock = world.sockets[inode];
                Probe::Tcp(SocketFacts {
                    inode: Some(sock.inode),
                    local: Some(([127, 0, 0, 1], 40000 + sock.inode as u16).into()),
                    remote: Some(([127, 0, 0, 1], 8080).into()),
                    nodelay: sock.nodelay,
                    cork: sock.cork,
                    mss: Some(sock.mss),
                })
            }
        }
    }
}

/// One step of a scenario, `ms` milliseconds after its start.
#[derive(Clone)]
enum Step {
    /// A thread does something.
    Does(u64, Actor, Event),
    /// Someone outside the program (`tcpstall fix`) sets TCP_NODELAY on socket `inode`.
    FixedOutside(u64),
    /// The driver asks whether the return of a read by the thread on fd matters (`None`: the fd
    /// is no TCP socket).
    ReadFollowed(Actor, i32, Option<bool>),
    /// The driver asks, after [`Event::WaitBegun`], whether the wait's return matters.
    WaitFollowed(Actor, Option<Vec<i32>>, bool),
}

/// What the report would show of one socket (those with sends or reads).
#[derive(Debug, Clone, PartialEq)]
struct Shown {
    pid: u32,
    fd: i32,
    sends: u64,
    write_write_read: u64,
    waits_over_30ms: u64,
    /// The sizes of the example, if any.
    example: Option<Vec<u64>>,
}

/// A socket shown with no write-write-read.
fn clean(pid: u32, fd: i32, sends: u64) -> Shown {
    Shown {
        pid,
        fd,
        sends,
        write_write_read: 0,
        waits_over_30ms: 0,
        example: None,
    }
}

/// A socket shown with `count` write-write-reads, `long` of them followed by a wait of 30 ms
/// or more, the longest wait after the sends `example`.
fn held(pid: u32, fd: i32, sends: u64, count: u64, long: u64, example: &[u64]) -> Shown {
    Shown {
        pid,
        fd,
        sends,
        write_write_read: count,
        waits_over_30ms: long,
        example: Some(example.to_vec()),
    }
}

struct Scenario {
    name: &'static str,
    /// The fds that hold sockets: (pid, fd, socket).
    world: Vec<(u32, i32, Sock)>,
    steps: Vec<Step>,
    shown: Vec<Shown>,
}

fn does(ms: u64, who: Actor, event: Event) -> Step {
    Step::Does(ms, who, event)
}

fn start(who: Actor) -> Step {
    does(0, who, Event::ThreadStarted { parent: None })
}

fn send(ms: u64, who: Actor, fd: i32, bytes: u64) -> Step {
    does(
        ms,
        who,
        Event::Sent {
            fd,
            bytes,
            more: false,
        },
    )
}

/// A read seen returning.
fn read(ms: u64, who: Actor, fd: i32) -> Step {
    does(ms, who, Event::Read { fd, returned: true })
}

/// The classic round: a 76 B header and a 10 B body sent apart at `ms`, the reply read 41 ms
/// later (the peer's delayed ACK releasing the body).
fn split_round(ms: u64, who: Actor, fd: i32) -> Vec<Step> {
    vec![
        send(ms, who, fd, 76),
        send(ms, who, fd, 10),
        read(ms + 41, who, fd),
    ]
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "write-write-read on a Nagle socket",
            world: vec![(100, 3, nagle(1))],
            steps: [vec![start(MAIN)], split_round(0, MAIN, 3)].concat(),
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "one write per request is clean",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 86),
                read(1, MAIN, 3),
                send(2, MAIN, 3, 86),
                read(3, MAIN, 3),
            ],
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            name: "TCP_NODELAY on from the start",
            world: vec![(
                100,
                3,
                Sock {
                    nodelay: true,
                    ..nagle(1)
                },
            )],
            steps: [vec![start(MAIN)], split_round(0, MAIN, 3)].concat(),
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            name: "TCP_NODELAY set by the program mid-way",
            world: vec![(100, 3, nagle(1))],
            steps: [
                vec![start(MAIN)],
                split_round(0, MAIN, 3),
                vec![does(
                    50,
                    MAIN,
                    Event::OptionSet {
                        fd: 3,
                        option: TcpOption::NoDelay(true),
                    },
                )],
                split_round(60, MAIN, 3),
            ]
            .concat(),
            shown: vec![held(100, 3, 4, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "TCP_NODELAY set from outside while the sends wait: read again, not blamed",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                Step::FixedOutside(1),
                read(41, MAIN, 3),
            ],
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            name: "writev/sendmsg of both parts is one send",
            world: vec![(100, 3, nagle(1))],
            steps: vec![start(MAIN), send(0, MAIN, 3, 86), read(1, MAIN, 3)],
            shown: vec![clean(100, 3, 1)],
        },
        Scenario {
            name: "MSG_MORE joins a send to the next",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                does(
                    0,
                    MAIN,
                    Event::Sent {
                        fd: 3,
                        bytes: 76,
                        more: true,
                    },
                ),
                send(0, MAIN, 3, 10),
                read(1, MAIN, 3),
            ],
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            // The tracer turns a sendmmsg of two messages into two sends.
            name: "sendmmsg of header and body: one send per message",
            world: vec![(100, 3, nagle(1))],
            steps: [vec![start(MAIN)], split_round(0, MAIN, 3)].concat(),
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "a full segment then a small send: no sub-MSS tail to wait for",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, MSS),
                send(0, MAIN, 3, 100),
                read(41, MAIN, 3),
                send(50, MAIN, 3, 2 * MSS),
                send(50, MAIN, 3, 100),
                read(91, MAIN, 3),
            ],
            shown: vec![clean(100, 3, 4)],
        },
        Scenario {
            name: "a send ending in a partial segment then a small one is held",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, MSS + 52),
                send(0, MAIN, 3, 100),
                read(41, MAIN, 3),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[MSS + 52, 100])],
        },
        Scenario {
            name: "the MSS the socket shows is the one judged by",
            world: vec![(
                100,
                3,
                Sock {
                    mss: 988,
                    ..nagle(1)
                },
            )],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 988),
                send(0, MAIN, 3, 100),
                read(41, MAIN, 3),
                send(50, MAIN, 3, 900),
                send(50, MAIN, 3, 100),
                read(60, MAIN, 3),
            ],
            shown: vec![held(100, 3, 4, 1, 0, &[900, 100])],
        },
        Scenario {
            name: "header through a dup, body through the fd: one socket",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 1),
                read(1, MAIN, 3),
                does(2, MAIN, Event::Duplicated { from: 3, to: 5 }),
                send(2, MAIN, 5, 76),
                send(2, MAIN, 3, 10),
                does(2, MAIN, Event::Closed { fd: 5 }),
                read(43, MAIN, 3),
            ],
            shown: vec![held(100, 3, 3, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "closing one of two fds keeps the sends, closing the last drops them",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 1),
                does(0, MAIN, Event::Duplicated { from: 3, to: 7 }),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                does(1, MAIN, Event::Closed { fd: 3 }),
                read(41, MAIN, 7),
                send(50, MAIN, 7, 76),
                send(50, MAIN, 7, 10),
                does(51, MAIN, Event::Closed { fd: 7 }),
            ],
            shown: vec![held(100, 3, 5, 1, 1, &[1, 76, 10])],
        },
        Scenario {
            name: "a forked child sends on the inherited socket, the parent reads",
            // The child's fd 3 is not in the world: it is known from the parent's table.
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                // Alone, the parent's read needs no return; it has looked at fd 3.
                Step::ReadFollowed(MAIN, 3, Some(false)),
                does(
                    1,
                    MAIN,
                    Event::Read {
                        fd: 3,
                        returned: false,
                    },
                ),
                does(
                    2,
                    CHILD,
                    Event::ThreadStarted {
                        parent: Some(MAIN.tgid),
                    },
                ),
                Step::ReadFollowed(MAIN, 3, Some(true)),
                send(3, CHILD, 3, 76),
                send(3, CHILD, 3, 10),
                read(44, MAIN, 3),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "a forked child closing its copy leaves the parent's sends waiting",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                does(
                    1,
                    CHILD,
                    Event::ThreadStarted {
                        parent: Some(MAIN.tgid),
                    },
                ),
                does(1, CHILD, Event::Closed { fd: 3 }),
                // The child's fd 3 is something else now; the parent's is still the socket.
                does(2, CHILD, Event::SocketOpened { fd: 3, tcp: false }),
                read(41, MAIN, 3),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "a reader thread blocked in recv before the sends",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                start(READER),
                // Before any send, a second thread may send while this read blocks.
                Step::ReadFollowed(READER, 3, Some(true)),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                read(41, READER, 3),
                // The last sender is another thread: still followed; the sender's own read
                // with nothing sent is not.
                Step::ReadFollowed(READER, 3, Some(true)),
                Step::ReadFollowed(MAIN, 3, Some(false)),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "a single-threaded loop's reads need no return until it sends",
            world: vec![(100, 3, nagle(1)), (100, 4, nagle(2))],
            steps: vec![
                start(MAIN),
                Step::ReadFollowed(MAIN, 3, Some(false)),
                does(0, MAIN, Event::SocketOpened { fd: 9, tcp: false }),
                Step::ReadFollowed(MAIN, 9, None),
                send(0, MAIN, 3, 76),
                Step::ReadFollowed(MAIN, 3, Some(true)),
                // An unfollowed read counts but ends nothing.
                does(
                    0,
                    MAIN,
                    Event::Read {
                        fd: 4,
                        returned: false,
                    },
                ),
                send(0, MAIN, 3, 10),
                read(41, MAIN, 3),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10]), clean(100, 4, 0)],
        },
        Scenario {
            name: "TCP_CORK: the cork, not Nagle, holds the sends",
            world: vec![(100, 3, nagle(1))],
            steps: [
                vec![
                    start(MAIN),
                    does(
                        0,
                        MAIN,
                        Event::OptionSet {
                            fd: 3,
                            option: TcpOption::Cork(true),
                        },
                    ),
                ],
                split_round(0, MAIN, 3),
            ]
            .concat(),
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            name: "the reply read by a program exec'd with the socket as stdin",
            world: vec![(100, 3, nagle(1)), (100, 0, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                does(1, MAIN, Event::Exec { former: MAIN.tid }),
                read(41, MAIN, 0),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "a poll for the reply times the wait; a poll on another fd does not",
            world: vec![(100, 3, nagle(1)), (100, 4, nagle(2))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 76),
                send(0, MAIN, 3, 10),
                does(
                    0,
                    MAIN,
                    Event::WaitBegun {
                        readable: Some(vec![4]),
                    },
                ),
                Step::WaitFollowed(MAIN, Some(vec![4]), false),
                does(
                    5,
                    MAIN,
                    Event::WaitBegun {
                        readable: Some(vec![3]),
                    },
                ),
                Step::WaitFollowed(MAIN, Some(vec![3]), true),
                does(
                    45,
                    MAIN,
                    Event::WaitEnded {
                        readable: Some(vec![3]),
                    },
                ),
                read(45, MAIN, 3),
            ],
            shown: vec![held(100, 3, 2, 1, 1, &[76, 10])],
        },
        Scenario {
            name: "an epoll wait ends sends that cannot be held without timing them",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                send(0, MAIN, 3, 86),
                does(0, MAIN, Event::WaitBegun { readable: None }),
                Step::WaitFollowed(MAIN, None, false),
                send(10, MAIN, 3, 76),
                send(10, MAIN, 3, 10),
                does(10, MAIN, Event::WaitBegun { readable: None }),
                Step::WaitFollowed(MAIN, None, true),
                // A short wait: a write-write-read, not a long one.
                does(15, MAIN, Event::WaitEnded { readable: None }),
            ],
            shown: vec![held(100, 3, 3, 1, 0, &[76, 10])],
        },
        Scenario {
            name: "a thread that exits takes its unanswered sends with it",
            world: vec![(100, 3, nagle(1))],
            steps: vec![
                start(MAIN),
                start(READER),
                send(0, READER, 3, 76),
                send(0, READER, 3, 10),
                does(1, READER, Event::ThreadExited),
                read(41, MAIN, 3),
            ],
            shown: vec![clean(100, 3, 2)],
        },
        Scenario {
            name: "sockets the program opens or accepts, and files that are not sockets",
            world: vec![(100, 3, nagle(1)), (100, 5, nagle(2))],
            steps: vec![
                start(MAIN),
                does(0, MAIN, Event::SocketOpened { fd: 3, tcp: true }),
                does(0, MAIN, Event::SocketOpened { fd: 4, tcp: false }),
                does(0, MAIN, Event::Accepted { fd: 5 }),
                send(0, MAIN, 4, 76),
                send(0, MAIN, 4, 10),
                read(41, MAIN, 4),
                send(50, MAIN, 5, 76),
                send(50, MAIN, 5, 10),
                read(91, MAIN, 5),
            ],
            shown: vec![held(100, 5, 2, 1, 1, &[76, 10])],
        },
    ]
}

/// Runs a scenario: the sockets shown (with sends or reads), in the order first seen.
fn run(scenario: &Scenario) -> Vec<Shown> {
    let world = Scripted::default();
    {
        let mut w = world.0.borrow_mut();
        for &(pid, fd, sock) in &scenario.world {
            w.fds.insert((pid, fd), Some(sock.inode));
            w.sockets.insert(sock.inode, sock);
        }
    }
    let mut model = SocketModel::new(world.clone());
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    for (i, step) in scenario.steps.iter().enumerate() {
        let name = scenario.name;
        match step {
            Step::Does(ms, who, event) => model.apply(*who, at(*ms), event.clone()),
            Step::FixedOutside(inode) => {
                if let Some(sock) = world.0.borrow_mut().sockets.get_mut(inode) {
                    sock.nodelay = true;
                }
            }
            Step::ReadFollowed(who, fd, expected) => assert_eq!(
                model.read_can_end_sends(*who, *fd),
                *expected,
                "{name}: step {i}, read on fd {fd}"
            ),
            Step::WaitFollowed(who, readable, expected) => assert_eq!(
                model.wait_ends_held_sends(*who, readable),
                *expected,
                "{name}: step {i}, wait on {readable:?}"
            ),
        }
    }
    model
        .into_sockets()
        .into_iter()
        .filter(|s| s.sends > 0 || s.reads > 0)
        .map(|s| Shown {
            pid: s.pid,
            fd: s.fd,
            sends: s.sends,
            write_write_read: s.write_write_read,
            waits_over_30ms: s.waits_over_30ms,
            example: s.example.map(|e| e.writes),
        })
        .collect()
}

#[test]
fn scenarios_show_what_they_expect() {
    let scenarios = scenarios();
    assert!(scenarios.len() >= 12);
    for scenario in &scenarios {
        assert_eq!(run(scenario), scenario.shown, "{}", scenario.name);
    }
}

#[test]
fn the_example_is_the_longest_wait() {
    let scenario = Scenario {
        name: "three rounds",
        world: vec![(100, 3, nagle(1))],
        steps: [
            vec![start(MAIN)],
            split_round(0, MAIN, 3),
            vec![
                send(50, MAIN, 3, 5),
                send(50, MAIN, 3, 6),
                read(150, MAIN, 3),
            ],
            split_round(200, MAIN, 3),
        ]
        .concat(),
        shown: vec![held(100, 3, 6, 3, 3, &[5, 6])],
    };
    assert_eq!(run(&scenario), scenario.shown);
}
