/* What both BPF objects use: constants, the per-CPU counters (the includer defines
 * COUNT_SLOTS first), sequence-space order and the TCP socket test. */
#ifndef TCPSTALL_SHARED_H
#define TCPSTALL_SHARED_H

#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define SOCK_STREAM 1
/* include/net/tcp.h: TCP_NAGLE_OFF 1 (TCP_NODELAY), TCP_NAGLE_CORK 2 (TCP_CORK); either
 * disables the Nagle test (tcp_nagle_check). */
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNT_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void count(__u32 slot)
{
	__u64 *c = bpf_map_lookup_elem(&counts, &slot);
	if (c)
		*c += 1;
}

/* Sequence-space comparison (include/net/tcp.h before()). */
static __always_inline int seq_before(__u32 a, __u32 b)
{
	return (__s32)(a - b) < 0;
}

/* The acknowledgment number of a segment tcp_probe hands over: bytes 8..11 of its TCP
 * header. Nonzero when it cannot be read. */
static __always_inline int segment_ack(struct sk_buff *skb, __u32 *ack)
{
	unsigned char *head = BPF_CORE_READ(skb, head);
	__u16 th = BPF_CORE_READ(skb, transport_header);
	__u32 ack_be = 0;
	if (bpf_probe_read_kernel(&ack_be, sizeof(ack_be), head + th + 8))
		return -1;
	*ack = __builtin_bswap32(ack_be);
	return 0;
}

/* Whether a held tail ending at `end_seq` has left (snd_nxt has passed it) without waiting
 * for the ACK; then *ago is the jiffies since the socket last sent data (lsndtime,
 * tcp_event_data_sent): when the tail left, so long as nothing was sent since. */
static __always_inline int tail_left(struct sock *sk, __u32 end_seq, __u32 *ago)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (seq_before(BPF_CORE_READ(tp, snd_nxt), end_seq))
		return 0;
	*ago = (__u32)bpf_jiffies64() - BPF_CORE_READ(tp, lsndtime);
	return 1;
}

static __always_inline int is_tcp(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	return (family == AF_INET || family == AF_INET6) &&
	       BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP &&
	       BPF_CORE_READ(sk, sk_type) == SOCK_STREAM;
}

#endif
