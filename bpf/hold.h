/* When Nagle holds a socket's tail and when the hold ends, as both BPF objects that follow holds
 * judge it (nagle.bpf.c for `watch --kernel`, trace.bpf.c for `trace -p`): whether a send
 * leaves its tail held, whether a segment received or a state change ends the hold, and how.
 * What each object keeps of a hold and the record it sends stay its own. Include after the
 * counters' COUNT_SLOTS is defined (shared.h). */
#ifndef TCPSTALL_HOLD_H
#define TCPSTALL_HOLD_H

#include "shared.h"

/* include/net/tcp.h: TCP_NAGLE_OFF 1 (TCP_NODELAY), TCP_NAGLE_CORK 2 (TCP_CORK); either
 * disables the Nagle test (tcp_nagle_check). */
#define TCP_NAGLE_OFF 1
#define TCP_NAGLE_CORK 2

/* The sequence numbers that tell a hold's end, kept with it. */
struct hold_seq {
	__u32 sml;     /* end of the small segment in flight (snd_sml): the ACK past it releases */
	__u32 end_seq; /* write_seq after the hold's latest write: sent once snd_nxt reaches it */
};

/* A socket's send queue right after a write (sock_send_length). */
struct send_queue {
	__u32 unsent;  /* write_seq - snd_nxt: written, not sent yet */
	__u32 snd_una; /* the oldest byte not acknowledged */
	struct hold_seq at;
};

/* Whether Nagle holds the tail of `sk`'s send queue after a write, with `mss` (mss_cache)
 * and `nonagle` as the caller read them; *q is filled either way. tcp_nagle_check with
 * tcp_minshall_check: a partial segment waits while Nagle is on, packets are in flight and a
 * small segment among them is unacknowledged. A queue of a full segment or more waits for the
 * congestion or receive window, not for Nagle. */
static __always_inline int nagle_holds(struct sock *sk, __u32 mss, __u32 nonagle,
				       struct send_queue *q)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 write_seq = BPF_CORE_READ(tp, write_seq);
	__u32 snd_nxt = BPF_CORE_READ(tp, snd_nxt);
	q->snd_una = BPF_CORE_READ(tp, snd_una);
	q->at.sml = BPF_CORE_READ(tp, snd_sml);
	q->at.end_seq = write_seq;
	q->unsent = write_seq - snd_nxt;
	return q->unsent > 0 && q->unsent < mss && BPF_CORE_READ(tp, packets_out) > 0 &&
	       !(nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) && seq_before(q->snd_una, q->at.sml) &&
	       !seq_before(snd_nxt, q->at.sml);
}

/* Whether a write Nagle did not hold leaves its own tail as the small segment the next partial
 * write would wait behind: Nagle on, everything written sent, the last segment sent small
 * (tcp_minshall_update set snd_sml to its end, which is the end of the write) and not
 * acknowledged yet. The write a hold follows is such a write; the hold finds it again by its
 * end (hold_seq.sml). */
static __always_inline int tail_may_hold_next(const struct send_queue *q, __u32 nonagle)
{
	return !(nonagle & (TCP_NAGLE_OFF | TCP_NAGLE_CORK)) && q->unsent == 0 &&
	       q->at.sml == q->at.end_seq && seq_before(q->snd_una, q->at.sml);
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

/* Whether the held tail has left (snd_nxt has passed its end) without waiting for the ACK: a
 * timer sent it (the tail-loss probe sends new data whatever Nagle says,
 * tcp_send_loss_probe), or an option change pushed it. Then *ago is the jiffies since the
 * socket last sent data (lsndtime, tcp_event_data_sent): when the tail left, so long as
 * nothing was sent since.
 *
 * Asked at each segment received (hold_at_segment) and when the congestion state changes
 * (tcp:tcp_cong_state_set, from tcp_set_ca_state). The RTO's change is the one that matters:
 * tcp_retransmit_timer calls tcp_enter_loss, which sets the Loss state, then clears
 * tlp_high_seq, then the timer resends the first unacknowledged segment, moving lsndtime. If
 * the loss probe sent the tail and no segment has come since (tcp_probe would have ended the
 * hold), this is the last moment both still say so. Other changes come from an ACK, which
 * tcp_probe saw first, or from the sender's own congestion (tcp_enter_cwr): judged by snd_nxt
 * all the same. */
static __always_inline int hold_left(struct sock *sk, const struct hold_seq *at, __u32 *ago)
{
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	if (seq_before(BPF_CORE_READ(tp, snd_nxt), at->end_seq))
		return 0;
	*ago = (__u32)bpf_jiffies64() - BPF_CORE_READ(tp, lsndtime);
	return 1;
}

/* What a segment the socket receives (tcp_probe, at the start of tcp_rcv_established) does to
 * a hold. */
enum hold_end {
	HOLD_GOES_ON = 0, /* the small segment is still unacknowledged */
	HOLD_LEFT = 1,    /* the tail had left before this segment came (hold_left): not its ACK */
	HOLD_ACKED = 2,   /* the ACK of the small segment: tcp_data_snd_check sends the tail now */
};

/* What `skb`, received by `sk`, does to the hold at `at`; with HOLD_LEFT, *ago as hold_left
 * says. */
static __always_inline enum hold_end hold_at_segment(struct sock *sk, struct sk_buff *skb,
						     const struct hold_seq *at, __u32 *ago)
{
	if (hold_left(sk, at, ago))
		return HOLD_LEFT;
	__u32 ack = 0;
	if (segment_ack(skb, &ack))
		return HOLD_GOES_ON;
	/* tcp_minshall_check: held while the small segment is unacknowledged. */
	if (seq_before(ack, at->sml))
		return HOLD_GOES_ON;
	return HOLD_ACKED;
}

#endif
