/* What both BPF objects use: constants, the per-CPU counters (the includer defines
 * COUNT_SLOTS first), sequence-space order and the TCP socket test. How they follow Nagle
 * holds is in hold.h. */
#ifndef TCPSTALL_SHARED_H
#define TCPSTALL_SHARED_H

#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6
#define SOCK_STREAM 1

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

static __always_inline int is_tcp(struct sock *sk)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	return (family == AF_INET || family == AF_INET6) &&
	       BPF_CORE_READ(sk, sk_protocol) == IPPROTO_TCP &&
	       BPF_CORE_READ(sk, sk_type) == SOCK_STREAM;
}

#endif
