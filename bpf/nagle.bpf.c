// SPDX-License-Identifier: GPL-2.0
/* Nagle holds as the kernel sees them, for `tcpstall watch --kernel`.
 *
 * BTF tracepoints (tp_btf: no kprobe, no fentry, so a locked-down kernel allows them):
 *
 *  - sock:sock_send_length, after every sendmsg (sock_sendmsg_nosec), in the writer's own
 *    context: a TCP socket with Nagle on whose unsent bytes (write_seq - snd_nxt) are left
 *    waiting behind a small segment in flight is a hold (tcp_nagle_check with
 *    tcp_minshall_check). Its start, bytes, pid and command and the socket's addresses are
 *    kept in a hash map keyed by the socket.
 *  - tcp:tcp_probe, at the start of tcp_rcv_established for every segment the socket
 *    receives (softirq: no pid here, the socket ties it to the hold): an ACK that covers the
 *    small segment (snd_sml) releases the hold, and tcp_data_snd_check sends the held bytes
 *    right after. The completed hold goes to a ring buffer, without waking the reader
 *    (BPF_RB_NO_WAKEUP): user space polls every 10 ms, so a busy host pays no wake-up per
 *    hold.
 *
 * A hold may also end without the ACK: a timer sends the held bytes (the tail-loss probe
 * sends new data whatever Nagle says, tcp_send_loss_probe), seen as bytes already sent at
 * the next segment received or, if the RTO comes first, at tcp:tcp_cong_state_set when
 * tcp_enter_loss sets the Loss state, before it clears the probe's mark and the RTO's
 * resend moves lsndtime; or the socket closes (sock:inet_sock_set_state: to FIN_WAIT1 or
 * LAST_ACK the FIN pushes them out, to CLOSE a reset or abort discards them).
 * tcp:tcp_retransmit_skb marks a hold whose small segment the RTO or the loss probe resent:
 * its ACK came only after that timer.
 *
 * The call stacks (user_stack.h): the held write's own, and the write before it, kept per
 * socket at each write whose small tail the next write could wait behind: walked whole for a
 * process that has had a hold, its calling line only for any other (no walk: a lookup, a read
 * of the stack's top words), so that a process's first hold names the line before it too.
 * Both go out with the hold's record and are symbolized in user space. take_stacks (1 unless
 * the loader sets it: `watch --kernel --no-stacks`) turns this off.
 *
 * Holds shorter than min_emit_ns (1 ms unless the loader sets it: 0 for `watch --minor`) are
 * only counted. A write that empties the queue by itself (the held bytes reached a full
 * segment) ends the hold without a record.
 *
 * Build: scripts/build-bpf (clang -target bpf -O2 -g); the object is committed.
 */
#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* Holds released by their ACK sooner than this are counted short (COUNT_SHORT), whatever
 * is sent to user space. */
#define SHORT_NS 1000000ULL

/* Holds shorter than this are not sent to user space. In .rodata: the loader sets it before
 * the programs load (0: every hold is sent), and the verifier sees it as a constant. */
const volatile __u64 min_emit_ns = SHORT_NS;

/* How a hold ended; the values are read by src/watch/kernel.rs. */
#define RELEASE_ACK 1    /* the ACK of the small segment */
#define RELEASE_TLP 2    /* the tail-loss probe timer */
#define RELEASE_RTO 3    /* the retransmission timer */
#define RELEASE_PUSHED 4 /* sent without an ACK or a timer: TCP_NODELAY set, uncorked */
#define RELEASE_CLOSE 5  /* close(): the FIN pushed them */
#define RELEASE_RESET 6  /* reset or abort: discarded */
/* No zero-window probe ends a hold: tcp_probe_timer runs only with nothing in flight, and the
 * ACK that emptied the flight ended the hold first (tcp_probe). */

/* include/net/tcp_states.h, include/net/inet_connection_sock.h, enum tcp_ca_state */
#define TCP_FIN_WAIT1 4
#define TCP_CLOSE 7
#define TCP_LAST_ACK 9
#define ICSK_TIME_LOSS_PROBE 5
#define TCP_CA_LOSS 4

/* Counters, one slot each, per CPU. */
enum {
	COUNT_HOLDS = 0,      /* holds started */
	COUNT_SHORT = 1,      /* released by their ACK in under SHORT_NS */
	COUNT_RING_FULL = 2,  /* records lost: the ring was full */
	COUNT_BY_WRITE = 3,   /* ended by a write that sent everything */
	COUNT_BY_CLOSE = 4,   /* ended by close(): the FIN pushed the bytes */
	COUNT_BY_RESET = 5,   /* ended by a reset or abort */
	COUNT_SLOTS = 6,
};

#include "shared.h"
#include "hold.h"
#include "user_stack.h"

/* A completed hold, as user space reads it (struct HoldRecord in src/watch/kernel.rs). */
struct hold {
	__u64 sk;
	__u64 start_ns;
	__u64 end_ns;
	__u32 tgid;
	__u32 unsent;
	__u32 write_bytes;
	__u32 mss;
	__u32 min_rtt_us;
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u8 release;
	__u8 retrans;
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];
	__u32 sent_ago; /* jiffies before end_ns that the bytes left (lsndtime), timer releases */
	struct hold_stacks stacks; /* frames 0 in both when not taken */
};

/* A hold in progress, per socket. */
struct pending {
	__u64 start_ns;
	__u32 tgid;
	__u32 unsent;
	__u32 write_bytes;
	__u32 mss;
	__u32 min_rtt_us;
	struct hold_seq at; /* what tells the hold's end (hold.h) */
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u8 timer;    /* RELEASE_TLP or RELEASE_RTO: a timer resent the small segment */
	__u8 retrans;  /* segments resent during the hold */
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending);
} holds SEC(".maps");

/* The stacks of each hold in progress, beside holds: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct hold_stacks);
} hold_stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* Keeps the stacks of a hold that starts with this write (take_hold_stacks) beside it. */
static __always_inline void keep_hold_stacks(void *ctx, __u64 key, const struct send_queue *q)
{
	__u32 zero = 0;
	struct hold_stacks *scratch = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!scratch)
		return;
	take_hold_stacks(ctx, scratch, key, q);
	bpf_map_update_elem(&hold_stacks, &key, scratch, BPF_ANY);
}

SEC("tp_btf/sock_send_length")
int sock_send_length(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int ret = (int)ctx[1];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 key = (__u64)sk;

	if (ret <= 0 || !is_tcp(sk))
		return 0;
	__u32 mss = BPF_CORE_READ(tp, mss_cache);
	__u32 nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	struct send_queue q = {};
	int held = nagle_holds(sk, mss, nonagle, &q);

	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	if (!held) {
		if (p) {
			/* Everything left with this write: the hold ended without an ACK. */
			bpf_map_delete_elem(&holds, &key);
			count(COUNT_BY_WRITE);
		}
		remember_write(ctx, key, &q, nonagle);
		return 0;
	}
	/* A hold already waiting for an ACK that has not come: more bytes joined it. A record
	 * whose ACK point is already acknowledged is an old one (a missed release, or a socket
	 * reused at this address): start afresh. */
	if (p && seq_before(q.snd_una, p->at.sml)) {
		p->unsent = q.unsent;
		p->write_bytes = (__u32)ret;
		p->at.end_seq = q.at.end_seq;
		return 0;
	}
	struct pending n = {};
	n.start_ns = bpf_ktime_get_ns();
	n.tgid = bpf_get_current_pid_tgid() >> 32;
	n.unsent = q.unsent;
	n.write_bytes = (__u32)ret;
	n.at = q.at;
	n.mss = mss;
	/* The path's round trip without delayed ACKs in it (tcp_update_rtt_min), to tell the
	 * peer's ACK delay from the wait. */
	n.min_rtt_us = BPF_CORE_READ(tp, rtt_min.s[0].v);
	n.family = BPF_CORE_READ(sk, __sk_common.skc_family);
	n.lport = BPF_CORE_READ(sk, __sk_common.skc_num);
	n.rport = __builtin_bswap16(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (n.family == AF_INET) {
		__u32 s = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 d = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(n.saddr, &s, 4);
		__builtin_memcpy(n.daddr, &d, 4);
	} else {
		BPF_CORE_READ_INTO(&n.saddr, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&n.daddr, sk, __sk_common.skc_v6_daddr);
	}
	bpf_get_current_comm(n.comm, sizeof(n.comm));
	if (take_stacks)
		keep_hold_stacks(ctx, key, &q);
	bpf_map_update_elem(&holds, &key, &n, BPF_ANY);
	count(COUNT_HOLDS);
	return 0;
}

/* Sends the completed hold to user space (unless shorter than min_emit_ns; counted when
 * the ring is full) and forgets it. */
static __always_inline void finish(struct pending *p, __u64 key, __u8 release, __u32 sent_ago)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 held = now - p->start_ns;
	if (held < SHORT_NS && release == RELEASE_ACK)
		count(COUNT_SHORT);
	if (held < min_emit_ns) {
		bpf_map_delete_elem(&holds, &key);
		return;
	}
	struct hold *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
	if (!h) {
		count(COUNT_RING_FULL);
		bpf_map_delete_elem(&holds, &key);
		return;
	}
	h->sk = key;
	h->start_ns = p->start_ns;
	h->end_ns = now;
	h->tgid = p->tgid;
	h->unsent = p->unsent;
	h->write_bytes = p->write_bytes;
	h->mss = p->mss;
	h->min_rtt_us = p->min_rtt_us;
	h->family = p->family;
	h->lport = p->lport;
	h->rport = p->rport;
	h->release = release;
	h->retrans = p->retrans;
	h->sent_ago = sent_ago;
	__builtin_memcpy(h->saddr, p->saddr, 16);
	__builtin_memcpy(h->daddr, p->daddr, 16);
	__builtin_memcpy(h->comm, p->comm, 16);
	struct hold_stacks *stacks = take_stacks ? bpf_map_lookup_elem(&hold_stacks, &key) : 0;
	if (stacks) {
		bpf_probe_read_kernel(&h->stacks, sizeof(h->stacks), stacks);
		bpf_map_delete_elem(&hold_stacks, &key);
	} else {
		h->stacks.held.frames = 0;
		h->stacks.previous.frames = 0;
	}
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
	bpf_map_delete_elem(&holds, &key);
}

/* What sent the held bytes that have left already without the ACK of the small segment
 * (hold_left): named by the state the sender left. tlp_high_seq is set by
 * tcp_send_loss_probe once its probe is out (new data whatever Nagle says: tcp_write_xmit
 * with TCP_NAGLE_OFF) until the probe's ACK or tcp_enter_loss; else a timer that resent the
 * small segment, else an option change pushed them. */
static __always_inline __u8 left_by(struct pending *p, struct sock *sk)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (BPF_CORE_READ(tp, tlp_high_seq))
		return RELEASE_TLP;
	return p->timer ? p->timer : RELEASE_PUSHED;
}

SEC("tp_btf/tcp_probe")
int tcp_probe(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	struct sk_buff *skb = (struct sk_buff *)ctx[1];
	__u64 key = (__u64)sk;

	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	if (!p)
		return 0;
	__u32 ago = 0;
	enum hold_end end = hold_at_segment(sk, skb, &p->at, &ago);
	if (end == HOLD_LEFT)
		finish(p, key, left_by(p, sk), ago);
	else if (end == HOLD_ACKED) /* after a timer resent the small segment: its wait */
		finish(p, key, p->timer ? p->timer : RELEASE_ACK, 0);
	return 0;
}

/* The congestion state changes while a hold waits: held bytes the loss probe sent end the
 * hold here when the RTO enters Loss, before its resend moves lsndtime (hold_left). */
SEC("tp_btf/tcp_cong_state_set")
int tcp_cong_state_set(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u64 key = (__u64)sk;

	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	__u32 ago = 0;
	if (p && hold_left(sk, &p->at, &ago))
		finish(p, key, left_by(p, sk), ago);
	return 0;
}

/* A segment resent while a hold waits: by the tail-loss probe (its timer is the one
 * pending, tcp_write_timer_handler), by the RTO (tcp_enter_loss set the Loss state), or
 * by fast retransmit (an ACK's doing: no timer). */
SEC("tp_btf/tcp_retransmit_skb")
int tcp_retransmit_skb(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	__u64 key = (__u64)sk;

	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	if (!p)
		return 0;
	struct inet_connection_sock *icsk = (struct inet_connection_sock *)sk;
	if (BPF_CORE_READ(icsk, icsk_pending) == ICSK_TIME_LOSS_PROBE)
		p->timer = RELEASE_TLP;
	else if (BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ca_state) == TCP_CA_LOSS)
		p->timer = RELEASE_RTO;
	if (p->retrans < 255)
		p->retrans += 1;
	return 0;
}

/* The socket closes while a hold waits: close() queues the FIN and pushes the held bytes
 * with it (tcp_send_fin, TCP_NAGLE_OFF); a reset or abort discards them. Either way the
 * hold has ended, and is reported as ended, not lost. */
SEC("tp_btf/inet_sock_set_state")
int inet_sock_set_state(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int newstate = (int)ctx[2];
	__u64 key = (__u64)sk;

	if (newstate != TCP_FIN_WAIT1 && newstate != TCP_LAST_ACK && newstate != TCP_CLOSE)
		return 0;
	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	if (!p)
		return 0;
	if (newstate == TCP_CLOSE) {
		count(COUNT_BY_RESET);
		finish(p, key, RELEASE_RESET, 0);
	} else {
		count(COUNT_BY_CLOSE);
		finish(p, key, RELEASE_CLOSE, 0);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
