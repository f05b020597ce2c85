// Negotiator: this rank's side of the negotiation (Note [engine cycle]). It owns the requests
// this rank submitted until their responses run, the announcements it owes the other ranks,
// and the replicated state every rank keeps alike (negotiation.h: the pending table and the
// response cache). Each cycle the Runtime asks it for this rank's control vector, then for the
// responses the agreed vector and, if anyone announced, the full negotiation made ready.
//
// Thread safety: engine thread only.
#pragma once

#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/control_vector.h"
#include "engine/negotiation.h"
#include "engine/submission.h"
#include "engine/submission_board.h"
#include "engine/timeline.h"
#include "hora/communicator.h"

namespace hora::engine {

class Negotiator {
 public:
  Negotiator(Communicator& comm, Tracer& tracer, int cache_capacity);

  // Takes newly enqueued requests in: those the response cache knows wait for their slot's
  // byte, the others for the next full negotiation. No name is in flight twice (Runtime::enqueue).
  // Called every cycle: it also moves cached names a joined rank blocks to the announcements.
  void admit(std::vector<Submission> fresh);
  // Whether this rank has requests the other ranks have not heard of yet.
  bool hasAnnouncements() const { return !to_announce_.empty(); }
  // From now on this rank posts the cached names it waits for on `board` (Note [submission
  // board]); null: no board.
  void useBoard(std::unique_ptr<SubmissionBoard> board);
  bool hasBoard() const { return board_ != nullptr; }
  // With a board: whether every rank has submitted some cached name this rank waits for.
  bool someCachedNameIsComplete() const;

  // This rank's control vector: its cache bytes and whether it announces.
  ControlVector controlVector() const;
  // The cached responses the agreed vector made ready, with the joined ranks standing in.
  std::vector<Response> takeCached(const ControlVector& agreed);
  // Exchanges the requests not served by the cache and applies them to the replicated table;
  // appends what became ready (and the names decided in full, for the cache) to the lists.
  void negotiateInFull(std::vector<Response>& ready, std::vector<std::string>& fully_negotiated);
  // After execution: caches the responses negotiated in full that the next step will submit
  // again (Note [response cache]).
  void remember(std::vector<Response>& ready, const std::vector<std::string>& fully_negotiated);

  // This rank's submission of `name`; null where this rank did not submit it (it joined).
  Submission* inFlight(const std::string& name);
  // Removes this rank's submission of `name` once its response ran; nullopt if there is none.
  std::optional<Submission> release(const std::string& name);
  // Fails every request this rank has in flight.
  void failAll(std::exception_ptr error);

  const PendingTable& table() const { return table_; }
  // The autotuner switches the response cache on every rank at the same cycle. Off: new
  // submissions are announced in full and nothing more is cached; names cached before keep
  // their slots until negotiated afresh (alike on every rank, since the table is replicated).
  void setCacheEnabled(bool enabled) { cache_enabled_ = enabled; }

 private:
  // cached_waiting_ changes only through these, which keep this rank's row of the board equal to it.
  void waitInSlot(int slot, const std::string& name);
  std::map<int, std::string>::iterator stopWaiting(std::map<int, std::string>::iterator it);
  // The name waiting in `slot` moves to the next full negotiation.
  void announceInstead(std::map<int, std::string>::iterator it);

  Communicator& comm_;
  Tracer& tracer_;
  const int rank_, size_;

  std::map<std::string, Submission> in_flight_;  // by name
  std::map<int, std::string> cached_waiting_;    // cache slot -> name, this rank submitted it
  std::vector<std::string> to_announce_;         // in-flight names for the next full negotiation
  PendingTable table_;
  ResponseCache cache_;
  std::unique_ptr<SubmissionBoard> board_;
  bool cache_enabled_ = true;
};

}  // namespace hora::engine
