/* The few kernel types and fields nagle.bpf.c reads, declared by hand instead of a
 * multi-megabyte vmlinux.h: every struct carries preserve_access_index, so each field read is
 * a CO-RE relocation the loader resolves by name against the running kernel's BTF
 * (/sys/kernel/btf/vmlinux). Only names and types matter here, not offsets or order;
 * anonymous unions of the kernel's definitions are found by the loader's search. */
#ifndef TCPSTALL_NAGLE_H
#define TCPSTALL_NAGLE_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;
typedef __u32 __wsum;

enum bpf_map_type {
	BPF_MAP_TYPE_PERCPU_ARRAY = 6,
	BPF_MAP_TYPE_LRU_HASH = 9,
	BPF_MAP_TYPE_RINGBUF = 27,
};

enum {
	BPF_ANY = 0,
	BPF_RB_NO_WAKEUP = 1,
	BPF_F_USER_STACK = 1 << 8,
};

/* Read whole: its members are unions in the kernel. */
struct in6_addr {
	__u8 bytes[16];
};

struct sock_common {
	__be32 skc_daddr;
	__be32 skc_rcv_saddr;
	__be16 skc_dport;
	__u16 skc_num;
	unsigned short skc_family;
	struct in6_addr skc_v6_daddr;
	struct in6_addr skc_v6_rcv_saddr;
} __attribute__((preserve_access_index));

struct sock {
	struct sock_common __sk_common;
	__u16 sk_protocol;
	__u16 sk_type;
} __attribute__((preserve_access_index));

struct minmax_sample {
	__u32 t;
	__u32 v;
} __attribute__((preserve_access_index));

struct minmax {
	struct minmax_sample s[3];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 mss_cache;
	__u32 snd_sml;
	__u32 write_seq;
	__u8 nonagle : 4;
	__u32 snd_nxt;
	__u32 snd_una;
	struct minmax rtt_min;
	__u32 packets_out;
	__u32 lsndtime;
	__u32 tlp_high_seq;
} __attribute__((preserve_access_index));

struct inet_connection_sock {
	__u8 icsk_ca_state : 5;
	__u8 icsk_pending;
	__u8 icsk_probes_out;
} __attribute__((preserve_access_index));

/* arch/x86/include/asm/ptrace.h: the registers a task entered the kernel with, as the entry
 * code saved them: a syscall's arguments and number (trace.bpf.c), the user stack pointer
 * and instruction pointer (user_stack.h). */
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long orig_ax;
	unsigned long ip;
	unsigned long sp;
} __attribute__((preserve_access_index));

struct task_struct;

struct sk_buff {
	unsigned char *head;
	__u16 transport_header;
} __attribute__((preserve_access_index));

#endif
