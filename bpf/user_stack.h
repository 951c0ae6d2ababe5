/* The user-space call stacks of writes, taken in the writer's context at sock_send_length, for
 * both BPF objects that follow holds (nagle.bpf.c, trace.bpf.c): the frames the kernel walks
 * by frame pointers (bpf_get_stack with BPF_F_USER_STACK, perf_callchain_user), and the words
 * at the top of the user stack. A syscall wrapper that sets up no frame (glibc's write and
 * send on x86-64, single-threaded) leaves its return address at the top: the frame-pointer
 * walk, which starts from the caller's saved frame, skips exactly that caller, the line that
 * wrote. One that does (glibc's multi-threaded path saves a few registers and reuses the frame
 * register, so the walk stops there) leaves it a few words up. User space takes the first word
 * that is a return address (crates/tcpstall/src/host/call_stack.rs).
 *
 * Which writes: a hold's own write (the held one), and before it each write whose small tail a
 * next write could wait behind (tail_may_hold_next), kept per socket (last_send) until the
 * next: the hold finds it by its end (snd_sml), the write before. A process that has had a hold
 * (holding) has such writes walked whole; any other gets only its calling line kept (the
 * syscall's instruction pointer and the stack's top words: no walk), so that its first hold
 * still names the line of the write before it. Include after hold.h. */
#ifndef TCPSTALL_USER_STACK_H
#define TCPSTALL_USER_STACK_H

#include "nagle.h"
#include "hold.h"
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
	__u32 line_only;         /* 1: ips holds the instruction pointer only, not walked */
};

/* A hold's two call stacks: the write that was held and the write before it. */
struct hold_stacks {
	struct user_stack held;
	struct user_stack previous;
};

/* Whether call stacks are taken; in .rodata: the loader sets it before the programs load
 * (0: `--no-stacks`), and the verifier sees it as a constant. */
const volatile __u64 take_stacks = 1;

/* The stack of each socket's latest write that tail_may_hold_next: the write a hold follows. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct user_stack);
} last_send SEC(".maps");

/* The processes (tgid) that have had a hold: their writes' stacks are walked whole. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} holding SEC(".maps");

/* Where a stack is put together before it goes into a map: one per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct hold_stacks);
} stack_scratch SEC(".maps");

/* The words at the top of the current task's user stack, and its instruction pointer, at the
 * syscall; zeroes when they cannot be read. */
static __always_inline __u64 read_stack_top(struct user_stack *s)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (!regs) {
		__builtin_memset(s->top, 0, sizeof(s->top));
		return 0;
	}
	/* The helper zeroes the words when they cannot be read. */
	bpf_probe_read_user(s->top, sizeof(s->top), (void *)BPF_CORE_READ(regs, sp));
	return BPF_CORE_READ(regs, ip);
}

/* Fills *s with the current task's user stack; frames is 0 when none could be read. */
static __always_inline void take_user_stack(void *ctx, struct user_stack *s, __u32 end_seq)
{
	long n = bpf_get_stack(ctx, s->ips, sizeof(s->ips), BPF_F_USER_STACK);
	s->frames = n > 0 ? (__u32)(n / sizeof(__u64)) : 0;
	s->tgid = bpf_get_current_pid_tgid() >> 32;
	s->end_seq = end_seq;
	s->line_only = 0;
	read_stack_top(s);
}

/* Fills *s with the calling line of the current write only: the instruction pointer (the
 * syscall wrapper) and the top words, where its return address lies. */
static __always_inline void take_call_line(struct user_stack *s, __u32 end_seq)
{
	__u64 ip = read_stack_top(s);
	s->ips[0] = ip;
	s->frames = ip ? 1 : 0;
	s->tgid = bpf_get_current_pid_tgid() >> 32;
	s->end_seq = end_seq;
	s->line_only = 1;
}

/* Fills *s with the current write's stack: whole, or its calling line only. */
static __always_inline void take_write_stack(void *ctx, struct user_stack *s, int whole,
					     __u32 end_seq)
{
	if (whole)
		take_user_stack(ctx, s, end_seq);
	else
		take_call_line(s, end_seq);
}

/* After a write Nagle did not hold (*q as nagle_holds left it): keeps its stack per socket
 * when its small tail is one the next write could wait behind; whole for a process that has
 * had a hold, its calling line for any other. */
static __always_inline void remember_write(void *ctx, __u64 key, const struct send_queue *q,
					   __u32 nonagle)
{
	if (!take_stacks || !tail_may_hold_next(q, nonagle))
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	int whole = bpf_map_lookup_elem(&holding, &tgid) != 0;
	struct user_stack *s = bpf_map_lookup_elem(&last_send, &key);
	if (s) {
		take_write_stack(ctx, s, whole, q->at.end_seq);
		return;
	}
	__u32 zero = 0;
	struct hold_stacks *scratch = bpf_map_lookup_elem(&stack_scratch, &zero);
	if (!scratch)
		return;
	take_write_stack(ctx, &scratch->held, whole, q->at.end_seq);
	bpf_map_update_elem(&last_send, &key, &scratch->held, BPF_ANY);
}

/* Fills *to with the stacks of a hold that starts with the current write: its own, and the
 * kept stack of the write before when that write's end is the small segment the hold waits
 * behind (frames 0 otherwise); marks the process as holding. */
static __always_inline void take_hold_stacks(void *ctx, struct hold_stacks *to, __u64 key,
					     const struct send_queue *q)
{
	take_user_stack(ctx, &to->held, q->at.end_seq);
	struct user_stack *before = bpf_map_lookup_elem(&last_send, &key);
	if (before && before->end_seq == q->at.sml) {
		bpf_probe_read_kernel(&to->previous, sizeof(to->previous), before);
	} else {
		to->previous.frames = 0;
		to->previous.tgid = 0;
	}
	__u32 tgid = to->held.tgid;
	if (!bpf_map_lookup_elem(&holding, &tgid)) {
		__u8 yes = 1;
		bpf_map_update_elem(&holding, &tgid, &yes, BPF_ANY);
	}
}

#endif
