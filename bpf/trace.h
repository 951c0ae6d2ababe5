/* The kernel types trace.bpf.c reads beyond nagle.h's sockets, declared by hand with
 * preserve_access_index (CO-RE: each field is found by name in the running kernel's BTF). */
#ifndef TCPSTALL_TRACE_H
#define TCPSTALL_TRACE_H

#include "nagle.h"

enum {
	BPF_MAP_TYPE_HASH = 1,
};

/* arch/x86/include/asm/ptrace.h: the syscall's arguments as the entry code saved them. */
struct pt_regs {
	unsigned long di;
	unsigned long si;
	unsigned long dx;
	unsigned long r10;
	unsigned long orig_ax;
} __attribute__((preserve_access_index));

struct inode {
	unsigned short i_mode;
	unsigned long i_ino;
} __attribute__((preserve_access_index));

struct file {
	struct inode *f_inode;
	void *private_data;
} __attribute__((preserve_access_index));

struct fdtable {
	unsigned int max_fds;
	struct file **fd;
} __attribute__((preserve_access_index));

struct files_struct {
	struct fdtable *fdt;
} __attribute__((preserve_access_index));

struct task_struct {
	int pid;
	int tgid;
	struct files_struct *files;
} __attribute__((preserve_access_index));

struct socket {
	struct sock *sk;
} __attribute__((preserve_access_index));

#endif
