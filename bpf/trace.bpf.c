// SPDX-License-Identifier: GPL-2.0
/* The socket syscalls of a running process, for `tcpstall trace -p`, without stopping it.
 *
 * BTF tracepoints only (tp_btf: allowed where lockdown refuses kprobes and fentry):
 *
 *  - sys_enter / sys_exit (raw_syscalls): for the processes in `targets` (thread-group ids;
 *    every other process leaves after one map lookup), the followed syscalls on TCP sockets
 *    (the fd is looked up in the caller's fd table: an S_IFSOCK inode whose sock is TCP):
 *    reads and their returns, waits of a thread that sent since its last read (poll's and
 *    select's readable fds copied), connect and accept (a socket is named by the fd it was
 *    connected or accepted at), close, dup,
 *    setsockopt of TCP_NODELAY / TCP_CORK / TCP_QUICKACK. A send only marks the thread as
 *    sending on an fd.
 *  - sock:sock_send_length, after each sendmsg of the socket layer (sock_sendmsg_nosec), in
 *    the sender's context: one record per send (sendmmsg: per message) with its bytes,
 *    MSG_MORE, the socket's nonagle, MSS and addresses, and whether Nagle holds its tail
 *    right now (unsent bytes behind a small segment in flight: tcp_nagle_check). A held
 *    tail is remembered per socket until it leaves. A held send's record carries the call
 *    stacks of it and of the write before it (user_stack.h: the writes before a hold kept per
 *    socket, walked whole once the process has had a hold, else their calling line only).
 *  - tcp:tcp_probe, at the start of tcp_rcv_established for each segment a socket receives
 *    (softirq), only for sockets with a held tail: the ACK covering the small segment
 *    (snd_sml) releases it (tcp_data_snd_check sends it right after), or the tail had left
 *    already (a timer, an option change), lsndtime jiffies ago. One record says when, so
 *    user space times the hold itself, not the read that waits for the peer's next message.
 *  - tcp:tcp_cong_state_set, for sockets with a held tail: when the RTO enters the Loss
 *    state (tcp_enter_loss) before any segment came, a tail the loss probe sent already is
 *    released there, before the RTO's resend moves lsndtime.
 *  - sched_process_fork / sched_process_exec / sched_process_exit: a child of a target
 *    becomes a target (as ptrace's TRACEFORK follows it), exec and thread ends are told.
 *
 * Records go to a ring buffer without waking the reader (BPF_RB_NO_WAKEUP): user space
 * (src/process/kernel_trace.rs) polls it every 10 ms and feeds the same socket model the
 * ptrace route feeds. x86-64 syscall numbers and registers.
 *
 * Build: scripts/build-bpf (clang -target bpf -O2 -g); the object is committed.
 */
#include "trace.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define EAGAIN 11
#define EINPROGRESS 115
#define MSG_MORE 0x8000
#define TCP_NODELAY 1
#define TCP_CORK 3
#define TCP_QUICKACK 12
#define F_DUPFD 0
#define F_DUPFD_CLOEXEC 1030

/* arch/x86/entry/syscalls/syscall_64.tbl */
#define NR_read 0
#define NR_write 1
#define NR_close 3
#define NR_poll 7
#define NR_readv 19
#define NR_writev 20
#define NR_select 23
#define NR_dup 32
#define NR_dup2 33
#define NR_sendfile 40
#define NR_connect 42
#define NR_accept 43
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_setsockopt 54
#define NR_fcntl 72
#define NR_epoll_wait 232
#define NR_pselect6 270
#define NR_ppoll 271
#define NR_epoll_pwait 281
#define NR_dup3 292
#define NR_accept4 288
#define NR_recvmmsg 299
#define NR_sendmmsg 307
#define NR_epoll_pwait2 441

/* Record kinds and flags, read by src/process/kernel_trace.rs. */
#define REC_SENT 1
#define REC_READ 2
#define REC_WAIT_BEGUN 3
#define REC_WAIT_ENDED 4
#define REC_CLOSED 5
#define REC_DUP 6
#define REC_OPTION 7
#define REC_FORK 8
#define REC_EXEC 9
#define REC_EXIT 10
#define REC_OPENED 11
#define REC_RELEASED 12

#define FLAG_MORE 1
#define FLAG_HELD 2      /* Nagle holds this send's tail now */
#define FLAG_EAGAIN 4    /* a read that found nothing */
#define FLAG_OVERFLOW 8  /* a wait naming more fds than the record holds */
#define FLAG_NO_READFDS 16 /* select without a readable set */
#define FLAG_LATE 32     /* released: the tail had left `arg` jiffies before this record */

#define WAIT_POLL 1
#define WAIT_SELECT 2
#define WAIT_EPOLL 3

#define DATA_LEN 64

/* A syscall of a target thread in progress, per thread. */
enum call {
	CALL_SEND = 1,
	CALL_READ = 2,
	CALL_WAIT = 3,
	CALL_DUP = 4,
	CALL_OPTION = 5,
	CALL_CONNECT = 6,
	CALL_ACCEPT = 7,
};

struct inflight {
	__u64 sk;
	__u64 inode;
	__s32 fd;
	__u32 arg;   /* dup: the target fd (or -1: the return is it); option: its name */
	__u32 value; /* option: its value */
	__u8 call;
	__u8 pad[3];
};

/* One record (struct layout mirrored by RECORD_LEN and the offsets in kernel_trace.rs). */
struct record {
	__u64 ts_ns;
	__u64 inode;
	__s64 ret;
	__u32 tid;
	__u32 tgid;
	__s32 fd;
	__u32 arg;
	__u32 value;
	__u32 mss;
	__u8 kind;
	__u8 flags;
	__u8 nonagle;
	__u8 wait;
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u16 pad;
	__u32 pad2;
	__u8 saddr[16];
	__u8 daddr[16];
	__u8 data[DATA_LEN];
};

enum {
	COUNT_RECORDS = 0,
	COUNT_RING_FULL = 1,
	COUNT_SLOTS = 2,
};

#include "shared.h"
#include "hold.h"
#include "user_stack.h"

/* A send Nagle holds as it returns, with the call stacks of it and of the write before it
 * (user_stack.h), unless the loader turned them off (`trace --no-stacks`). */
struct held_record {
	struct record r;
	struct hold_stacks stacks;
};

/* The per-thread and per-socket maps below hold one process tree's threads and sockets, not
 * a host's: 4096 entries each (past that many at once, the least recently used entry goes).
 * An LRU map is made whole as it is created, before the traced command may start: 16384
 * entries took 0.45 ms a map. */

/* Thread-group ids followed; user space puts the target in, forks add their children. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct inflight);
} inflight SEC(".maps");

/* Threads that sent on a TCP socket since their last read returned: only their waits can end
 * sends (a wait of any other thread is not recorded, which saves two records a wait). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} senders SEC(".maps");

/* The held tail of a socket's last send, by sock, until it leaves: who sent it, and the
 * sequence numbers that tell its release. */
struct held {
	__u32 tid;
	__u32 tgid;
	__s32 fd;
	struct hold_seq at; /* what tells the hold's end (hold.h) */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct held);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} records SEC(".maps");


/* The TCP sock behind fd `fd` of the current process (and its inode), or 0. */
static __always_inline struct sock *tcp_of_fd(__s32 fd, __u64 *inode)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || (__u32)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = 0;
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	struct inode *ino = BPF_CORE_READ(f, f_inode);
	if ((BPF_CORE_READ(ino, i_mode) & S_IFMT) != S_IFSOCK)
		return 0;
	struct socket *sock = (struct socket *)BPF_CORE_READ(f, private_data);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk || !is_tcp(sk))
		return 0;
	*inode = BPF_CORE_READ(ino, i_ino);
	return sk;
}

static __always_inline int followed(__u32 tgid)
{
	return bpf_map_lookup_elem(&targets, &tgid) != 0;
}

/* Zeroes the record `r` just reserved (0: the ring was full, counted) as one of `kind` for
 * the current thread; returns it. */
static __always_inline struct record *start_record(struct record *r, __u8 kind)
{
	if (!r) {
		count(COUNT_RING_FULL);
		return 0;
	}
	__builtin_memset(r, 0, sizeof(*r));
	__u64 id = bpf_get_current_pid_tgid();
	r->ts_ns = bpf_ktime_get_ns();
	r->tid = (__u32)id;
	r->tgid = id >> 32;
	r->kind = kind;
	return r;
}

/* A zeroed record of `kind` for the current thread, or 0 when the ring is full. */
static __always_inline struct record *new_record(__u8 kind)
{
	return start_record(bpf_ringbuf_reserve(&records, sizeof(struct record), 0), kind);
}

static __always_inline void submit(struct record *r)
{
	count(COUNT_RECORDS);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/* The socket's options and addresses as the kernel has them now. */
static __always_inline void describe(struct record *r, struct sock *sk, __u64 inode)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	r->inode = inode;
	r->mss = BPF_CORE_READ(tp, mss_cache);
	r->nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	r->family = BPF_CORE_READ(sk, __sk_common.skc_family);
	r->lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	r->rport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (r->family == AF_INET) {
		__u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(r->saddr, &s, 4);
		__builtin_memcpy(r->daddr, &d, 4);
	} else {
		BPF_CORE_READ_INTO(&r->saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&r->daddr, sk, __sk_common.skc_v6_daddr);
	}
}

/* Remembers a syscall on TCP fd `fd` until it returns; false when fd is no TCP socket.
 * A global function: the verifier checks it once (its scalar arguments assumed any value)
 * rather than at each of sys_enter's eight calls, a third of that program's verification. */
__attribute__((noinline)) int begin(__u32 tid, __u8 call, __s32 fd, __u32 arg, __u32 value)
{
	struct inflight f = {};
	__u64 inode = 0;
	struct sock *sk = tcp_of_fd(fd, &inode);
	if (!sk)
		return 0;
	f.sk = (__u64)sk;
	f.inode = inode;
	f.fd = fd;
	f.arg = arg;
	f.value = value;
	f.call = call;
	bpf_map_update_elem(&inflight, &tid, &f, BPF_ANY);
	return 1;
}

/* Copies the first `words` 8-byte words at user address `from` (at most DATA_LEN / 8), one
 * word at a time: a constant size the verifier can check against the record. */
static __always_inline void copy_words(__u8 *to, const void *from, __u32 words)
{
#pragma unroll
	for (int i = 0; i < DATA_LEN / 8; i++) {
		if (i >= words)
			break;
		bpf_probe_read_user(to + i * 8, 8, (const __u8 *)from + i * 8);
	}
}

/* A wait begins: poll's pollfd array or select's readable bitmap is copied for user space. */
static __always_inline void wait_begins(__u32 tid, __u8 how, __u64 a0, __u64 a1)
{
	if (!bpf_map_lookup_elem(&senders, &tid))
		return;
	struct record *r = new_record(REC_WAIT_BEGUN);
	if (!r)
		return;
	r->wait = how;
	if (how == WAIT_POLL) {
		/* struct pollfd is 8 bytes: the first DATA_LEN / 8 entries. */
		__u64 n = a1;
		r->arg = (__u32)n;
		if (n > DATA_LEN / 8) {
			r->flags |= FLAG_OVERFLOW;
			n = DATA_LEN / 8;
		}
		copy_words(r->data, (void *)a0, (__u32)n);
	} else if (how == WAIT_SELECT) {
		/* nfds, then the readable bitmap: the fds below DATA_LEN * 8. */
		__u64 n = a0;
		r->arg = (__u32)n;
		if (!a1) {
			r->flags |= FLAG_NO_READFDS;
		} else {
			if (n > DATA_LEN * 8) {
				r->flags |= FLAG_OVERFLOW;
				n = DATA_LEN * 8;
			}
			/* Whole longs, as the kernel's get_fd_set copies them. */
			copy_words(r->data, (void *)a1, ((__u32)n + 63) / 64);
		}
	}
	submit(r);
	struct inflight f = {};
	f.call = CALL_WAIT;
	f.fd = -1;
	bpf_map_update_elem(&inflight, &tid, &f, BPF_ANY);
}

SEC("tp_btf/sys_enter")
int sys_enter(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if (!followed(id >> 32))
		return 0;
	struct pt_regs *regs = (struct pt_regs *)ctx[0];
	long nr = (long)ctx[1];
	__s32 fd = (__s32)BPF_CORE_READ(regs, di);
	switch (nr) {
	case NR_write:
	case NR_writev:
	case NR_sendto:
	case NR_sendmsg:
	case NR_sendmmsg:
	case NR_sendfile:
		/* The record comes from sock_send_length, one per send. */
		begin(tid, CALL_SEND, fd, 0, 0);
		return 0;
	case NR_read:
	case NR_readv:
	case NR_recvfrom:
	case NR_recvmsg:
	case NR_recvmmsg:
		begin(tid, CALL_READ, fd, 0, 0);
		return 0;
	case NR_poll:
	case NR_ppoll:
		wait_begins(tid, WAIT_POLL, BPF_CORE_READ(regs, di), BPF_CORE_READ(regs, si));
		return 0;
	case NR_select:
	case NR_pselect6:
		wait_begins(tid, WAIT_SELECT, BPF_CORE_READ(regs, di), BPF_CORE_READ(regs, si));
		return 0;
	case NR_epoll_wait:
	case NR_epoll_pwait:
	case NR_epoll_pwait2:
		wait_begins(tid, WAIT_EPOLL, 0, 0);
		return 0;
	case NR_close: {
		__u64 inode = 0;
		struct sock *sk = tcp_of_fd(fd, &inode);
		if (!sk)
			return 0;
		/* A tail held at close leaves with the FIN or is discarded: no release to time. */
		__u64 key = (__u64)sk;
		bpf_map_delete_elem(&holds, &key);
		struct record *r = new_record(REC_CLOSED);
		if (!r)
			return 0;
		r->fd = fd;
		describe(r, sk, inode);
		submit(r);
		return 0;
	}
	case NR_connect:
		begin(tid, CALL_CONNECT, fd, 0, 0);
		return 0;
	case NR_accept:
	case NR_accept4:
		begin(tid, CALL_ACCEPT, fd, 0, 0);
		return 0;
	case NR_dup:
		begin(tid, CALL_DUP, fd, (__u32)-1, 0);
		return 0;
	case NR_dup2:
	case NR_dup3:
		begin(tid, CALL_DUP, fd, (__u32)BPF_CORE_READ(regs, si), 0);
		return 0;
	case NR_fcntl: {
		__u64 cmd = BPF_CORE_READ(regs, si);
		if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC)
			begin(tid, CALL_DUP, fd, (__u32)-1, 0);
		return 0;
	}
	case NR_setsockopt: {
		__u64 level = BPF_CORE_READ(regs, si);
		__u64 name = BPF_CORE_READ(regs, dx);
		if (level != IPPROTO_TCP ||
		    (name != TCP_NODELAY && name != TCP_CORK && name != TCP_QUICKACK))
			return 0;
		int value = 0;
		if (bpf_probe_read_user(&value, sizeof(value), (void *)BPF_CORE_READ(regs, r10)))
			return 0;
		begin(tid, CALL_OPTION, fd, (__u32)name, (__u32)value);
		return 0;
	}
	}
	return 0;
}

SEC("tp_btf/sys_exit")
int sys_exit(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if (!followed(id >> 32))
		return 0;
	struct inflight *f = bpf_map_lookup_elem(&inflight, &tid);
	if (!f)
		return 0;
	long ret = (long)ctx[1];
	struct record *r = 0;
	switch (f->call) {
	case CALL_READ:
		r = new_record(REC_READ);
		if (r && ret == -EAGAIN)
			r->flags |= FLAG_EAGAIN;
		else
			bpf_map_delete_elem(&senders, &tid);
		break;
	case CALL_WAIT:
		r = new_record(REC_WAIT_ENDED);
		break;
	case CALL_DUP:
		if (ret >= 0) {
			r = new_record(REC_DUP);
			if (r)
				r->arg = f->arg == (__u32)-1 ? (__u32)ret : f->arg;
		}
		break;
	case CALL_CONNECT:
		/* A connection from this fd: the socket is named by it from now on. */
		if (ret == 0 || ret == -EINPROGRESS)
			r = new_record(REC_OPENED);
		break;
	case CALL_ACCEPT:
		/* A new connection at the returned fd (not the listener's). */
		if (ret >= 0) {
			__u64 inode = 0;
			struct sock *sk = tcp_of_fd((__s32)ret, &inode);
			if (sk && (r = new_record(REC_OPENED))) {
				r->ret = ret;
				r->fd = (__s32)ret;
				describe(r, sk, inode);
				submit(r);
			}
			r = 0;
		}
		break;
	case CALL_OPTION:
		if (ret == 0) {
			r = new_record(REC_OPTION);
			if (r) {
				r->arg = f->arg;
				r->value = f->value;
			}
		}
		break;
	}
	if (r) {
		r->ret = ret;
		r->fd = f->fd;
		if (f->sk)
			describe(r, (struct sock *)f->sk, f->inode);
		submit(r);
	}
	bpf_map_delete_elem(&inflight, &tid);
	return 0;
}

SEC("tp_btf/sock_send_length")
int sock_send_length(__u64 *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if (!followed(id >> 32))
		return 0;
	struct sock *sk = (struct sock *)ctx[0];
	int ret = (int)ctx[1];
	int flags = (int)ctx[2];
	struct inflight *f = bpf_map_lookup_elem(&inflight, &tid);
	/* Only a send syscall's own socket: not a send the kernel makes on the thread's behalf. */
	if (!f || f->call != CALL_SEND || f->sk != (__u64)sk || ret <= 0)
		return 0;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	struct send_queue q = {};
	int held = nagle_holds(sk, BPF_CORE_READ(tp, mss_cache), nonagle, &q);
	__u64 key = (__u64)sk;
	struct record *r;
	if (held && take_stacks) {
		struct held_record *hr = bpf_ringbuf_reserve(&records, sizeof(*hr), 0);
		r = start_record(hr ? &hr->r : 0, REC_SENT);
		if (!hr || !r)
			return 0;
		take_hold_stacks(ctx, &hr->stacks, key, &q);
	} else {
		r = new_record(REC_SENT);
		if (!r)
			return 0;
		remember_write(ctx, key, &q, nonagle);
	}
	r->fd = f->fd;
	r->ret = ret;
	if (flags & MSG_MORE)
		r->flags |= FLAG_MORE;
	describe(r, sk, f->inode);
	if (held)
		r->flags |= FLAG_HELD;
	r->value = q.unsent;
	submit(r);
	/* The socket's tail now: held until tcp_probe sees it leave, or nothing held. */
	if (held) {
		struct held h = {};
		h.tid = tid;
		h.tgid = id >> 32;
		h.fd = f->fd;
		h.at = q.at;
		bpf_map_update_elem(&holds, &key, &h, BPF_ANY);
	} else {
		bpf_map_delete_elem(&holds, &key);
	}
	__u8 one = 1;
	bpf_map_update_elem(&senders, &tid, &one, BPF_ANY);
	return 0;
}

/* The held tail of socket `key` has left: one record for its sender, `ago` jiffies before
 * now if `late` (it left before this moment, not at it). */
static __always_inline void released(struct held *h, __u64 key, __u32 ago, __u8 late)
{
	struct record *r = new_record(REC_RELEASED);
	if (r) {
		/* Softirq or a timer: the sender named by the hold, not whoever runs now. */
		r->tid = h->tid;
		r->tgid = h->tgid;
		r->fd = h->fd;
		r->arg = ago;
		if (late)
			r->flags |= FLAG_LATE;
		submit(r);
	}
	bpf_map_delete_elem(&holds, &key);
}

SEC("tp_btf/tcp_probe")
int tcp_probe(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct sk_buff *skb = (struct sk_buff *)ctx[1];
	__u64 key = (__u64)sk;
	struct held *h = bpf_map_lookup_elem(&holds, &key);
	if (!h)
		return 0;
	__u32 ago = 0;
	enum hold_end end = hold_at_segment(sk, skb, &h->at, &ago);
	if (end != HOLD_GOES_ON)
		released(h, key, ago, end == HOLD_LEFT);
	return 0;
}

/* The congestion state changes while a tail is held: a tail the loss probe sent is released
 * here when the RTO enters Loss, before its resend moves lsndtime (hold_left). */
SEC("tp_btf/tcp_cong_state_set")
int tcp_cong_state_set(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u64 key = (__u64)sk;
	struct held *h = bpf_map_lookup_elem(&holds, &key);
	__u32 ago = 0;
	if (h && hold_left(sk, &h->at, &ago))
		released(h, key, ago, 1);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int sched_process_fork(__u64 *ctx)
{
	struct task_struct *parent = (struct task_struct *)ctx[0];
	struct task_struct *child = (struct task_struct *)ctx[1];
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	if (ptgid == ctgid || !followed(ptgid))
		return 0; /* a thread: its process is followed already */
	__u8 one = 1;
	bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	struct record *r = new_record(REC_FORK);
	if (!r)
		return 0;
	r->tid = BPF_CORE_READ(child, pid);
	r->tgid = ctgid;
	r->arg = ptgid;
	submit(r);
	return 0;
}

/* A record of `kind` about the current thread, if it is followed. */
static __always_inline void tell(__u8 kind, __u32 arg)
{
	if (!followed(bpf_get_current_pid_tgid() >> 32))
		return;
	struct record *r = new_record(kind);
	if (!r)
		return;
	r->arg = arg;
	submit(r);
}

SEC("tp_btf/sched_process_exec")
int sched_process_exec(__u64 *ctx)
{
	tell(REC_EXEC, (__u32)ctx[1]); /* old_pid: the thread's id before exec */
	return 0;
}

SEC("tp_btf/sched_process_exit")
int sched_process_exit(__u64 *ctx)
{
	tell(REC_EXIT, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
