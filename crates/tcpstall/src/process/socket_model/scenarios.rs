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

/// The send queue a socket shows unless a scenario says otherwise: nothing unsent, the last
/// data sent 1 ms before each look (a tail held 40 ms and the reply read 41 ms after it).
const LEFT_1MS_AGO: SendQueue = SendQueue {
    notsent: 0,
    unacked: 0,
    since_last_sent: Duration::from_millis(1),
};

/// The scripted world the model looks at fds in.
#[derive(Default)]
struct World {
    /// (pid, fd) → the socket it holds, `None` for a non-TCP file.
    fds: HashMap<(u32, i32), Option<u64>>,
    /// inode → the socket.
    sockets: HashMap<u64, Sock>,
    /// inode → its send queue now, when a scenario sets one (`None`: unreadable).
    queues: HashMap<u64, Option<SendQueue>>,
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
                    queue: world
                        .queues
                        .get(&sock.inode)
                        .copied()
                        .unwrap_or(Some(LEFT_1MS_AGO)),
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
    /// Socket `inode` shows this send queue from now on (`None`: TCP_INFO unreadable).
    Queue(u64, Option<SendQueue>),
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

/// A send, seen by ptrace: nothing said of its tail.
fn send(ms: u64, who: Actor, fd: i32, bytes: u64) -> Step {
    sent(ms, who, fd, bytes, None)
}

/// A send whose tail the kernel said was kept back by Nagle (`held`) or not, as it returned.
fn sent_held(ms: u64, who: Actor, fd: i32, bytes: u64, held: bool) -> Step {
    sent(ms, who, fd, bytes, Some(held))
}

fn sent(ms: u64, who: Actor, fd: i32, bytes: u64, held: Option<bool>) -> Step {
    let more = false;
    does(
        ms,
        who,
        Event::Sent {
            fd,
            bytes,
            more,
            held,
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
                        held: None,
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
                // The body still kept back when the poll begins.
                Step::Queue(
                    1,
                    Some(SendQueue {
                        notsent: 10,
                        unacked: 1,
                        since_last_sent: Duration::ZERO,
                    }),
                ),
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
                Step::Queue(1, Some(LEFT_1MS_AGO)),
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
fn sockets_after(scenario: &Scenario) -> Vec<TracedSocket> {
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
            Step::Queue(inode, queue) => {
                world.0.borrow_mut().queues.insert(*inode, *queue);
            }
        }
    }
    model
        .into_sockets()
        .into_iter()
        .filter(|s| s.sends > 0 || s.reads > 0)
        .collect()
}

/// Runs a scenario: what the report would show of each socket.
fn run(scenario: &Scenario) -> Vec<Shown> {
    sockets_after(scenario)
        .into_iter()
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
fn the_example_is_the_longest_hold() {
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

/// The one socket of a scenario on fd 3 of MAIN, after its steps.
fn socket_after(steps: Vec<Step>) -> TracedSocket {
    let scenario = Scenario {
        name: "hold",
        world: vec![(100, 3, nagle(1))],
        steps: [vec![start(MAIN)], steps].concat(),
        shown: Vec::new(),
    };
    sockets_after(&scenario).remove(0)
}

fn queue(notsent: u32, unacked: u32, since_last_sent_ms: u64) -> Step {
    Step::Queue(
        1,
        Some(SendQueue {
            notsent,
            unacked,
            since_last_sent: Duration::from_millis(since_last_sent_ms),
        }),
    )
}

#[test]
fn the_kernel_times_the_hold_not_the_peers_idle_time() {
    let s = socket_after(vec![
        // The kernel's records say it all: no TCP_INFO on this route.
        Step::Queue(1, None),
        // The body kept back until the peer's delayed ACK 40 ms later; the next request 300 ms
        // after that.
        sent_held(0, MAIN, 3, 76, false),
        sent_held(0, MAIN, 3, 10, true),
        does(40, MAIN, Event::HeldTailLeft { fd: 3 }),
        read(340, MAIN, 3),
        // Quick ACKs: nothing kept back, the read waits 300 ms all the same.
        sent_held(400, MAIN, 3, 76, false),
        sent_held(400, MAIN, 3, 10, false),
        read(700, MAIN, 3),
        // Kept back, its leaving not told (a record lost): the read bounds it.
        sent_held(800, MAIN, 3, 76, false),
        sent_held(800, MAIN, 3, 10, true),
        read(1100, MAIN, 3),
    ]);
    assert_eq!(s.write_write_read, 3);
    assert_eq!(s.waits_over_30ms, 1);
    assert_eq!(s.unmeasured_holds_over_30ms, 1);
    assert_eq!(s.idle_waits_over_30ms, 1);
    assert_eq!(s.longest_idle_wait_ms, Some(300.0));
    let example = s.example.expect("an example");
    assert_eq!(example.hold_ms, Some(40.0));
    assert_eq!(example.wait_ms, 340.0);
    assert!(!example.hold_is_upper_bound);
}

/// A ptrace round: header and body sent at `ms`, the send queue `begun` when the read begins
/// (`None`: the read began before the sends), `ended` when it returns `wait` ms later.
fn looked_round(ms: u64, begun: Option<Step>, ended: Step, wait: u64) -> Vec<Step> {
    let mut steps = vec![send(ms, MAIN, 3, 76), send(ms, MAIN, 3, 10)];
    if let Some(queue) = begun {
        steps.push(queue);
        steps.push(does(ms, MAIN, Event::ReadBegun { fd: 3 }));
    }
    steps.push(ended);
    steps.push(read(ms + wait, MAIN, 3));
    steps
}

#[test]
fn tcp_info_tells_a_hold_from_idle_time() {
    let s = socket_after(
        [
            // Kept back when the read began; at its end the socket last sent 300 ms before:
            // the body left 40 ms after it was written.
            looked_round(0, Some(queue(10, 1, 0)), queue(0, 0, 300), 340),
            // Nothing unsent when the read began, the last send then: the 300 ms are the
            // peer's.
            looked_round(400, Some(queue(0, 0, 0)), queue(0, 0, 300), 300),
            // Kept back when the read began, TCP_INFO unreadable at its end: at most the read.
            looked_round(800, Some(queue(10, 1, 0)), Step::Queue(1, None), 300),
            // Still kept back when a read begun before the sends returns: at least its wait.
            looked_round(1200, None, queue(10, 1, 0), 50),
            // A full segment unsent is the window's doing, not Nagle's.
            looked_round(
                1300,
                Some(queue(2 * MSS as u32, 1, 0)),
                queue(0, 0, 200),
                300,
            ),
        ]
        .concat(),
    );
    assert_eq!(s.write_write_read, 5);
    assert_eq!(s.waits_over_30ms, 2, "{s:#?}");
    assert_eq!(s.unmeasured_holds_over_30ms, 1);
    assert_eq!(s.idle_waits_over_30ms, 2);
    let example = s.example.expect("an example");
    assert_eq!((example.hold_ms, example.wait_ms), (Some(50.0), 50.0));
}

#[test]
fn the_kernels_held_sends_are_counted_per_socket_not_per_fd() {
    // Two connections accepted one after the other at the same fd.
    let scenario = Scenario {
        name: "fd reused",
        world: vec![],
        steps: vec![
            start(MAIN),
            does(0, MAIN, Event::Accepted { fd: 4 }),
            sent_held(0, MAIN, 4, 76, false),
            sent_held(0, MAIN, 4, 10, true),
            does(40, MAIN, Event::HeldTailLeft { fd: 4 }),
            read(41, MAIN, 4),
            does(50, MAIN, Event::Closed { fd: 4 }),
            does(60, MAIN, Event::Accepted { fd: 4 }),
            sent_held(60, MAIN, 4, 76, false),
            sent_held(60, MAIN, 4, 10, false),
            read(360, MAIN, 4),
        ],
        shown: Vec::new(),
    };
    let sockets = sockets_after(&scenario);
    let held: Vec<u64> = sockets.iter().map(|s| s.kernel_held_sends).collect();
    assert_eq!(held, vec![1, 0]);
    let waits: Vec<(u64, u64)> = sockets
        .iter()
        .map(|s| (s.waits_over_30ms, s.idle_waits_over_30ms))
        .collect();
    assert_eq!(waits, vec![(1, 0), (0, 1)]);
}
