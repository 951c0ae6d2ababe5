// SPDX-License-Identifier: GPL-2.0
/* Every TCP socket of the network namespace in one pass, for `tcpstall sockets --all`.
 *
 * A BPF iterator over the kernel's TCP hash tables (`iter/tcp`, bpf_iter_tcp_seq_show in
 * net/ipv4/tcp_ipv4.c, which runs the program with the socket locked): one fixed-size record
 * per socket, written with bpf_seq_write, read by user space from the iterator's fd. What it
 * reads is what `ss` cannot show: tp->nonagle (TCP_NODELAY, TCP_CORK), a pending delayed ACK
 * (icsk_ack.pending), the ping-pong count, the bytes written and not sent.
 *
 * The section is named as aya-obj 0.2 parses it (it knows no "iter/" sections: the program's
 * context is bpf_iter_tcp's arguments, as an fentry program's on that function would be);
 * src/process/bpf_iter.rs loads it as BPF_TRACE_ITER itself.
 *
 * Build: scripts/build-bpf (clang -target bpf -O2 -g); the object is committed.
 */
#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
/* enum tsq_enum: TSQ_THROTTLED is bit 0 of sk_tsq_flags; tcp_push sets it when it autocorks
 * (tcp_should_autocork), tcp_small_queue_check when the qdisc holds enough of the socket's. */
#define TSQF_THROTTLED 1UL
/* enum tcp_seq_states: the sockets that are a full tcp_sock have another state. */
#define TCP_TIME_WAIT 6
#define TCP_NEW_SYN_RECV 12

/* The kernel types read here, flavoured (___iter) so that they stand beside nagle.h's: the
 * loader matches them to the kernel's by the name before the three underscores. */
struct sock_common___iter {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	volatile unsigned char skc_state;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct inode___iter {
	unsigned long i_ino;
} __attribute__((preserve_access_index));

struct file___iter {
	struct inode___iter *f_inode;
} __attribute__((preserve_access_index));

struct socket___iter {
	struct file___iter *file;
} __attribute__((preserve_access_index));

struct sock___iter {
	unsigned long sk_tsq_flags;
	struct socket___iter *sk_socket;
} __attribute__((preserve_access_index));

struct timer_list___iter {
	unsigned long expires;
} __attribute__((preserve_access_index));

struct inet_connection_sock___iter {
	struct timer_list___iter icsk_delack_timer;
	__u32 icsk_delack_max;
	struct {
		__u8 pending;
		__u8 quick;
		__u8 pingpong;
		__u32 ato : 8;
	} icsk_ack;
} __attribute__((preserve_access_index));

struct tcp_sock___iter {
	__u32 mss_cache;
	__u32 write_seq;
	__u32 snd_nxt;
	__u32 snd_cwnd;
	__u32 packets_out;
	__u32 srtt_us;
	__u32 data_segs_in;
	__u32 data_segs_out;
	__u8 nonagle : 4;
} __attribute__((preserve_access_index));

struct seq_file;

struct bpf_iter_meta {
	struct seq_file *seq;
} __attribute__((preserve_access_index));

struct bpf_iter__tcp {
	struct bpf_iter_meta *meta;
	struct sock_common___iter *sk_common;
	__u32 uid;
} __attribute__((preserve_access_index));

/* One socket, as user space reads it (SockRecord in src/process/host_sockets.rs). */
struct sock_rec {
	__u64 inode;        /* 0 for a socket no file holds: TIME_WAIT, SYN_RECV, orphaned */
	__u32 uid;
	__u32 unsent;       /* write_seq - snd_nxt */
	__u32 packets_out;
	__u32 snd_cwnd;
	__u32 mss_cache;
	__u32 srtt_us;      /* tcp_sock.srtt_us: 8 times the smoothed RTT */
	__u32 data_segs_in;
	__u32 data_segs_out;
	__s32 delack_due;   /* jiffies until the delayed-ACK timer fires, when pending */
	__u32 delack_max;   /* icsk_delack_max, jiffies; 0 where the kernel lacks it */
	__u16 family;
	__u16 lport;
	__u16 rport;
	__u8 state;
	__u8 full;          /* 1: a full tcp_sock, the fields after the addresses are read */
	__u8 nonagle;
	__u8 ack_pending;   /* icsk_ack.pending: ICSK_ACK_SCHED, ICSK_ACK_TIMER, ... */
	__u8 ack_quick;
	__u8 ack_pingpong;
	__u8 ato;           /* icsk_ack.ato, jiffies */
	__u8 throttled;     /* TSQ_THROTTLED: autocorked, or the qdisc holds enough already */
	__u8 pad[2];
	__u8 saddr[16];
	__u8 daddr[16];
};

SEC("fentry/bpf_iter_tcp")
int sockets(struct bpf_iter__tcp *ctx)
{
	struct sock_common___iter *skc = ctx->sk_common;
	struct seq_file *seq = ctx->meta->seq;
	struct sock_rec r = {};

	if (!skc)
		return 0;
	r.uid = ctx->uid;
	r.family = BPF_CORE_READ(skc, skc_family);
	r.state = BPF_CORE_READ(skc, skc_state);
	r.lport = BPF_CORE_READ(skc, skc_num);
	r.rport = __builtin_bswap16(BPF_CORE_READ(skc, skc_dport));
	if (r.family == AF_INET) {
		__u32 s = BPF_CORE_READ(skc, skc_rcv_saddr);
		__u32 d = BPF_CORE_READ(skc, skc_daddr);
		__builtin_memcpy(r.saddr, &s, 4);
		__builtin_memcpy(r.daddr, &d, 4);
	} else {
		BPF_CORE_READ_INTO(&r.saddr, skc, skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO(&r.daddr, skc, skc_v6_daddr);
	}
	/* TIME_WAIT and request sockets are a sock_common only (inet_timewait_sock,
	 * request_sock): no tcp_sock fields to read. */
	struct tcp_sock___iter *tp = (struct tcp_sock___iter *)bpf_skc_to_tcp_sock(skc);
	if (tp && r.state != TCP_TIME_WAIT && r.state != TCP_NEW_SYN_RECV) {
		struct sock___iter *sk = (struct sock___iter *)tp;
		struct inet_connection_sock___iter *icsk = (struct inet_connection_sock___iter *)tp;

		r.full = 1;
		r.inode = BPF_CORE_READ(sk, sk_socket, file, f_inode, i_ino);
		r.unsent = BPF_CORE_READ(tp, write_seq) - BPF_CORE_READ(tp, snd_nxt);
		r.packets_out = BPF_CORE_READ(tp, packets_out);
		r.snd_cwnd = BPF_CORE_READ(tp, snd_cwnd);
		r.mss_cache = BPF_CORE_READ(tp, mss_cache);
		r.srtt_us = BPF_CORE_READ(tp, srtt_us);
		r.data_segs_in = BPF_CORE_READ(tp, data_segs_in);
		r.data_segs_out = BPF_CORE_READ(tp, data_segs_out);
		r.nonagle = BPF_CORE_READ_BITFIELD_PROBED(tp, nonagle);
		r.ack_pending = BPF_CORE_READ(icsk, icsk_ack.pending);
		r.ack_quick = BPF_CORE_READ(icsk, icsk_ack.quick);
		r.ack_pingpong = BPF_CORE_READ(icsk, icsk_ack.pingpong);
		r.ato = BPF_CORE_READ_BITFIELD_PROBED(icsk, icsk_ack.ato);
		r.delack_due = (__s32)(BPF_CORE_READ(icsk, icsk_delack_timer.expires) - bpf_jiffies64());
		if (bpf_core_field_exists(icsk->icsk_delack_max))
			r.delack_max = BPF_CORE_READ(icsk, icsk_delack_max);
		if (bpf_core_field_exists(sk->sk_tsq_flags))
			r.throttled = BPF_CORE_READ(sk, sk_tsq_flags) & TSQF_THROTTLED;
	}
	bpf_seq_write(seq, &r, sizeof(r));
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
