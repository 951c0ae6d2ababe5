/* The user-space call stack of a write, taken in the writer's context at sock_send_length, for
 * both BPF objects that follow holds (nagle.bpf.c, trace.bpf.c): the frames the kernel walks
 * by frame pointers (bpf_get_stack with BPF_F_USER_STACK, perf_callchain_user), and the words
 * at the top of the user stack. A syscall wrapper that sets up no frame (glibc's write and
 * send on x86-64, single-threaded) leaves its return address at the top: the frame-pointer
 * walk, which starts from the caller's saved frame, skips exactly that caller, the line that
 * wrote. One that does (glibc's multi-threaded path saves a few registers and reuses the frame
 * register, so the walk stops there) leaves it a few words up. User space takes the first word
 * that is a return address (crates/tcpstall/src/host/call_stack.rs). */
#ifndef TCPSTALL_USER_STACK_H
#define TCPSTALL_USER_STACK_H

#include "nagle.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

/* Frames kept of a stack, innermost first. */
#define STACK_FRAMES 32
/* Words kept of the top of the user stack. */
#define STACK_TOP_WORDS 8

struct user_stack {
	__u64 ips[STACK_FRAMES]; /* instruction pointer, then return addresses */
	__u64 top[STACK_TOP_WORDS]; /* the words from the user stack pointer up, at the syscall */
	__u32 tgid;              /* whose address space the addresses are in */
	__u32 frames;            /* entries of ips filled; 0: no stack */
	__u32 end_seq;           /* write_seq after the write: finds it again as a hold's snd_sml */
	__u32 pad;
};

/* Fills *s with the current task's user stack; frames is 0 when none could be read. */
static __always_inline void take_user_stack(void *ctx, struct user_stack *s, __u32 end_seq)
{
	long n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
	s->frames = n > 0 ? (__u32)(n / sizeof(__u64)) : 0;
	s->tgid = bpf_get_current_pid_tgid() >> 32;
	s->end_seq = end_seq;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (regs) /* the helper zeroes the words when they cannot be read */
		bpf_probe_read_user(s->top, sizeof(s->top), (void *)BPF_CORE_READ(regs, sp));
	else
		__builtin_memset(s->top, 0, sizeof(s->top));
}

#endif
