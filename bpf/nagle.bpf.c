// SPDX-License-Identifier: GPL-2.0
/* Nagle holds as the kernel sees them, for `tcpstall watch --kernel`.
 *
 * Two BTF tracepoints (tp_btf: no kprobe, no fentry, so a locked-down kernel allows them):
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
 * Holds shorter than MIN_EMIT_NS are only counted. A write that empties the queue by itself
 * (the held bytes reached a full segment) ends the hold without a record.
 *
 * Build: scripts/build-bpf (clang -target bpf -O2 -g); the object is committed.
 */
#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* Holds shorter than this are counted, not sent to user space. */
#define MIN_EMIT_NS 1000000ULL

/* How a hold ended; the values are read by src/watch/kernel.rs. */
#define RELEASE_ACK 1

/* A hold in progress, per socket. */
struct pending {
	__u64 start_ns;
	__u32 tgid;
	__u32 unsent;
	__u32 write_bytes;
	__u32 sml; /* end of the small segment in flight: the ACK past it releases */
	__u32 mss;
	__u32 min_rtt_us;
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u16 pad;
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];
};

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
	__u8 pad;
	__u8 saddr[16];
	__u8 daddr[16];
	char comm[16];
};

/* Counters, one slot each, per CPU. */
enum {
	COUNT_HOLDS = 0,      /* holds started */
	COUNT_SHORT = 1,      /* released in under MIN_EMIT_NS */
	COUNT_RING_FULL = 2,  /* records lost: the ring was full */
	COUNT_BY_WRITE = 3,   /* ended by a write that sent everything */
	COUNT_SLOTS = 4,
};

#include "shared.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct pending);
} holds SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");


SEC("tp_btf/sock_send_length")
int sock_send_length(__u64 *ctx)
{
	struct sock *sk = (struct sock *)ctx[0];
	int ret = (int)ctx[1];
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u64 key = (__u64)sk;

	if (ret <= 0 || !is_tcp(sk))
		return 0;
	__u32 write_seq = BPF_CORE_READ(tp, write_seq);
	__u32 snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	__u32 snd_una = BPF_CORE_READ(tp, snd_una);
	__u32 sml = BPF_CORE_READ(tp, snd_sml);
	__u32 packets_out = BPF_CORE_READ(tp, packets_out);
	__u32 mss = BPF_CORE_READ(tp, mss_cache);
	__u32 nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
	__u32 unsent = write_seq - snd_nxt;

	struct pending *p = bpf_map_lookup_elem(&holds, &key);
	/* tcp_nagle_check: a partial segment waits while Nagle is on, packets are in flight
	 * and a small segment among them is unacknowledged (tcp_minshall_check). A queue of a
	 * full segment or more waits for the congestion or receive window, not for Nagle. */
	int held = unsent > 0 && unsent < mss && packets_out > 0 &&
		   !(nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) &&
		   seq_before(snd_una, sml) && !seq_before(snd_nxt, sml);
	if (!held) {
		if (p) {
			/* Everything left with this write: the hold ended without an ACK. */
			bpf_map_delete_elem(&holds, &key);
			count(COUNT_BY_WRITE);
		}
		return 0;
	}
	/* A hold already waiting for an ACK that has not come: more bytes joined it. A record
	 * whose ACK point is already acknowledged is an old one (a missed release, or a socket
	 * reused at this address): start afresh. */
	if (p && seq_before(snd_una, p->sml)) {
		p->unsent = unsent;
		p->write_bytes = (__u32)ret;
		return 0;
	}
	struct pending n = {};
	n.start_ns = bpf_ktime_get_ns();
	n.tgid = bpf_get_current_pid_tgid() >> 32;
	n.unsent = unsent;
	n.write_bytes = (__u32)ret;
	n.sml = sml;
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
	bpf_map_update_elem(&holds, &key, &n, BPF_ANY);
	count(COUNT_HOLDS);
	return 0;
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
	/* The segment's acknowledgment number: bytes 8..11 of its TCP header. */
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 th = BPF_CORE_READ(skb, transport_header);
	__u32 ack_be = 0;
	if (bpf_probe_read_kernel(&ack_be, sizeof(ack_be), head + th + 8))
		return 0;
	__u32 ack = __builtin_bswap32(ack_be);
	if (seq_before(ack, p->sml))
		return 0; /* the small segment is still unacknowledged: the hold goes on */

	__u64 now = bpf_ktime_get_ns();
	if (now - p->start_ns < MIN_EMIT_NS) {
		count(COUNT_SHORT);
		bpf_map_delete_elem(&holds, &key);
		return 0;
	}
	struct hold *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
	if (!h) {
		count(COUNT_RING_FULL);
		bpf_map_delete_elem(&holds, &key);
		return 0;
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
	h->release = RELEASE_ACK;
	h->pad = 0;
	__builtin_memcpy(h->saddr, p->saddr, 16);
	__builtin_memcpy(h->daddr, p->daddr, 16);
	__builtin_memcpy(h->comm, p->comm, 16);
	bpf_ringbuf_submit(h, BPF_RB_NO_WAKEUP);
	bpf_map_delete_elem(&holds, &key);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
