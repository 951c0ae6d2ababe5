/* The kernel types trace.bpf.c reads beyond nagle.h's sockets, declared by hand with
 * preserve_access_index (CO-RE: each field is found by name in the running kernel's BTF). */
#ifndef TCPSTALL_TRACE_H
#define TCPSTALL_TRACE_H

#include "nagle.h"

enum {
	BPF_MAP_TYPE_HASH = 1,
};

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
