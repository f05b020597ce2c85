// PeerGroup: the part of a transport that moves one transfer set to some of the peers, in steps
// that never block, so that one run() can drive several transports at once.
//
// Note [mixed transfer sets]: the ranks of one host talk over shared memory and the others over
// TCP, yet one collective's transfers mix both (a ring allgather receives from a neighbour on
// this host and forwards to one on the next host, chunk by chunk). Neither transport may block
// in its own loop while the other has work, so each is a PeerGroup: begin() takes the transfers
// to the peers it serves, advance() moves what can move without waiting, and waiting is one
// poll() over every group's file descriptors (prepareWait/finishWait). TCP sockets signal
// themselves; a shared-memory peer that moves a ring while this rank sleeps in poll() sends a
// wake-up byte on the socket the two ranks keep for liveness (shm_transport.cc).
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "hora/errors.h"
#include "transport/transport.h"

namespace hora::transport {

class PeerGroup {
 public:
  virtual ~PeerGroup() = default;

  virtual bool serves(int peer) const = 0;
  // Queues the transfers whose peer this group serves (Note [transfer sets] for the order).
  virtual void begin(std::span<Transfer> transfers) = 0;
  // One pass over the queued transfers without blocking; true when anything moved. Throws the
  // transport's errors (a closed peer, a mismatched message).
  virtual bool advance(const OpTag& tag) = 0;
  virtual bool pending() const = 0;

  // Before blocking: appends the descriptors whose readiness means this group can move (and arms
  // whatever makes peers signal them); false when it can move already. After poll(), or instead
  // of it: finishWait disarms, looks at its descriptors' revents (the same ones, in order) and
  // throws when a peer it waits for is gone.
  virtual bool prepareWait(std::vector<pollfd>& fds) = 0;
  virtual void finishWait(std::span<const pollfd> fds, const OpTag& tag) = 0;
  // "; receiving from rank 1 (...): 10 of 64 bytes arrived" for each transfer still open.
  virtual std::string owed() const = 0;

  // The same for an idle engine (Transport::waitForIncoming): prepareIdle returns false when a
  // peer has sent something already; finishIdle returns true when the engine must look now (a
  // peer's data on a socket, a lost peer; not a goodbye). Data that a wake-up byte announced is
  // found by the next prepareIdle.
  virtual bool prepareIdle(std::vector<pollfd>& fds) = 0;
  virtual bool finishIdle(std::span<const pollfd> fds) = 0;

  // After an error in a run that involved this group (its own, or another group's): later runs
  // rethrow `error`, and closing says no goodbye, so peers see a failure, not a clean exit.
  virtual void breakWith(const Error& error) = 0;
};

// Note [spin, then block]: a peer's answer to a small message comes within microseconds, and
// sleeping costs a wake-up of about as much again. So after a pass without progress a run may
// poll `busy_polls` times without a system call, then retry for `yield_for` calling sched_yield()
// between tries, and only then block. Two things decide whether it may (checked at every retry,
// since a frontend may start or stop waiting meanwhile):
//   - the host (CpuShare, Note [who may spin]): busy polling only where every rank has a core
//     for it, yields only where no compute thread of this process runs, and no spinning at all
//     while compute threads run and the cores are taken (training: the engine waits for a peer
//     during the backward pass; a spinning engine thread slowed the backward pass itself);
//   - the last waits (SpinHistory): spinning pays only when waits end within the spin; when
//     they mostly take longer (a peer still computing) the run sleeps at once.
// The yield matters: the scheduler often puts both ranks of a pair on one core, and a spin that
// keeps the core starves the very peer it waits for (75 us per hop measured over TCP, against
// 8 us with yields). On a loaded machine a yield can hand the core to another process for a
// whole time slice (2 ms measured); a yield that takes that long while busy polling is allowed
// turns yielding off for a second.
//
// The history counts long and short waits alike. Weighing long waits more (they burn a whole
// spin) was tried: with 4 ranks on 2 cores a rank descheduled for a time slice makes its peers'
// waits long now and then, a history that then stops spinning stops the yields that hand the
// cores around, and 4-byte allreduces took 23-37 us against 12-14 us (one noisy run each).
class SpinHistory {
 public:
  // Whether recent waits ended soon enough for a spin of `limit` to have caught them.
  bool worthSpinning() const { return score_ > 0; }
  void record(std::chrono::nanoseconds waited, std::chrono::microseconds limit) {
    score_ = waited <= limit ? std::min(score_ + 1, kBound) : std::max(score_ - 1, -kBound);
  }

 private:
  static constexpr int kBound = 3;
  int score_ = 1;  // optimistic: the first waits spin
};

class Spinner {
 public:
  using Clock = common::Deadline::Clock;
  // `history` and `yield_off_until` belong to the transport, so that they outlive one run.
  Spinner(int busy_polls, std::chrono::microseconds yield_for, SpinHistory& history,
          Clock::time_point& yield_off_until)
      : busy_polls_(busy_polls), yield_for_(yield_for), history_(history), yield_off_until_(yield_off_until) {}

  // After a pass that moved something: ends the current wait, if one began, and records it.
  void progressed() {
    if (wait_began_ != Clock::time_point{}) {
      history_.record(Clock::now() - wait_began_, yield_for_);
      wait_began_ = {};
    }
    polls_ = 0;
    yield_until_ = {};
  }
  // True: retry now (after a pause or a yield made here). False: block.
  bool again();

 private:
  const int busy_polls_;
  const std::chrono::microseconds yield_for_;
  SpinHistory& history_;
  Clock::time_point& yield_off_until_;
  int polls_ = 0;
  Clock::time_point wait_began_{};
  Clock::time_point yield_until_{};
};

// Runs the transfers of every group to completion, blocking in one poll() over all of them;
// throws TimeoutError naming what each group still owes when `deadline` passes.
void runGroups(std::span<PeerGroup* const> groups, std::span<Transfer> transfers, const OpTag& tag,
               const common::Deadline& deadline, Spinner& spinner);

// Blocks until a group is woken (PeerGroup::prepareIdle), `wake_fd` is readable or `timeout`
// passes; false on timeout.
bool waitIdle(std::span<PeerGroup* const> groups, std::chrono::milliseconds timeout, int wake_fd);

}  // namespace hora::transport
