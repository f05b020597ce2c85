// The messages between a worker and a parameter server (docs/parameter_servers.md).
//
// A message is a fixed MessageHeader and `bytes` of payload. The channel (channel.h) sends both
// in one transfer set and the receiver reads the header first, so it knows how much payload to
// wait for. Payloads are shards (ShardLayout in sharding.h: the float64 elements, then the
// float32 ones), a Registration, or (kError) the text of an error.
//
// Note [optimizer state]: an async server's optimizer state (SGD's velocity, Adam's moments, ...)
// lives on the server, and a checkpoint or an elastic commit must hold it, or a restored job
// starts its moments from zero. kState asks a server for it: the reply carries the shard's slots
// one after another (slotsOf(): the optimizer's, in ShardState's order) and the optimizer's step
// count in `step`. A registration may carry such slots after the initial parameters, with that
// count in `optimizer_step`: worker 0's become the new server's starting state.
#pragma once

#include <cstdint>
#include <string>

namespace hora::ps {

inline constexpr uint32_t kMessageMagic = 0x33535048;  // "HPS3": lr and momentum in double

enum class MessageKind : uint8_t {
  kRegister = 1,  // worker -> server: Registration (+ the initial shard in async mode)
  kPush = 2,      // worker -> server: elements [offset, offset + n) of the gradient shard of step
                  // `step`; a step's parts come in order, and the last one is answered
  kReply = 3,     // server -> worker: floats (a sum, a mean, or the parameters)
  kError = 4,     // server -> worker: why the request failed
  kBye = 5,       // worker -> server: this worker is done
  kState = 6,     // worker -> server, async: the optimizer's state, answered by a kReply
                  // (Note [optimizer state])
};

struct MessageHeader {
  uint32_t magic = kMessageMagic;
  MessageKind kind = MessageKind::kReply;
  uint8_t error_kind = 0;  // kError: a hora::ErrorKind
  uint16_t reserved = 0;
  uint32_t worker = 0;
  uint32_t reserved2 = 0;
  // push, async: the learning rate and momentum (SGD, RMSprop) the server's optimizer applies it
  // with, in double: a float64 tensor is updated with the lr its optimizer holds, not float32's.
  double lr = 0;
  double momentum = 0;
  uint64_t step = 0;     // push: the worker's step (1, 2, ...); reply: the worker's applied steps
  uint64_t slowest = 0;  // reply: the fewest steps any live worker has had applied
  uint64_t bytes = 0;    // payload
  uint64_t version = 0;  // reply: pushes this server has applied in all (async), or rounds (sync)
  uint64_t offset = 0;   // push: the part's first element in the shard (Note [overlapped pushes])
};
static_assert(sizeof(MessageHeader) == 72);

enum class Mode : uint32_t { kSync = 1, kAsync = 2 };

// The optimizer an async server applies the pushes with.
enum class Optimizer : uint32_t {
  kSgd = 0, kAdam = 1, kAdagrad = 2, kRmsprop = 3, kAdamax = 4, kAdadelta = 5, kNadam = 6, kRadam = 7
};

// What a worker tells a server when it connects; every worker of a job must send the same
// (but its own worker number, which travels in the header).
struct Registration {
  Mode mode = Mode::kSync;
  uint32_t workers = 0;
  int64_t max_staleness = -1;  // async only; -1: unbounded
  double lr = 0;               // async only: the server's optimizer, as the worker's was made
  double momentum = 0;         // (each push then carries its lr and momentum: a schedule's changes)
  uint32_t average = 0;  // sync: 1 = reply with the mean, 0 = the sum
  // async: 1 = Keras' form of the update, 0 = torch's (ShardState). The same parameters for SGD
  // while lr is constant; a schedule makes them differ (and RMSprop's momentum), and where
  // epsilon goes differs for Adam, Adagrad and RMSprop.
  uint32_t keras_form = 0;
  uint64_t shard_elements = 0;
  uint64_t layout_hash = 0;
  Optimizer optimizer = Optimizer::kSgd;  // async
  uint32_t centered = 0;  // async, RMSprop: 1 = divide by the gradients' estimated variance, not mean square
  // async: Adam's, Adamax's, NAdam's and RAdam's betas and epsilon. RMSprop's and Adadelta's
  // decay of the mean square (torch's alpha and rho, Keras' rho) travels as beta2, the field of the
  // same role in Adam; every optimizer's epsilon as epsilon.
  double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  // async: Adagrad's (torch's) lr / (1 + (t - 1) lr_decay) at step t; NAdam's momentum decay d, its
  // momentum at step t being beta1 (1 - 0.96^(t d) / 2) (torch's momentum_decay; Keras' is 1).
  double lr_decay = 0;
  double initial_accumulator = 0;  // async, Adagrad: where the sum of squared gradients starts
  // 1 = the pushes' floats (and sync replies') travel as float16 (Compression.fp16): half the
  // bytes; the server sums and applies in float32. Only for a shard without float64 elements.
  uint32_t fp16 = 0;
  // async: 1 = weight decay decoupled from the gradient, p -= lr wd p before the update (torch's
  // AdamW, Keras' weight_decay); 0 = added to it, g + wd p (torch's weight_decay of the others).
  uint32_t decoupled_weight_decay = 0;
  double weight_decay = 0;  // async
  // async, Note [optimizer state]: the payload holds this many optimizer slots after the initial
  // parameters (0, or slotsOf() the optimizer), and the step count they were reached at. Only
  // worker 0's are used, so they are not compared across workers.
  uint32_t slots = 0;
  // async, NAdam: 1 = torch < 2.0's form, whose product of momenta for step t + 1 counts step t's
  // twice (torch 2.0 fixed it; the servers compute what the worker's own optimizer would).
  uint32_t nadam_twice = 0;
  uint64_t optimizer_step = 0;
  // How many of the shard's shard_elements are float64 (ShardLayout: they come first, in every
  // payload). The server holds, sums and applies them in float64, the others in float32.
  uint64_t wide_elements = 0;
};
static_assert(sizeof(Registration) == 144);

// The optimizer state an async server keeps per element, in the order kState answers with:
// SGD the velocity; Adam the first and second moments; Adagrad the sum of squares;
// RMSprop the momentum buffer, the mean square and (centered) the mean gradient; Adamax the first
// moment and the infinity norm; Adadelta the mean square and the mean squared update; NAdam and
// RAdam the first and second moments.
uint32_t slotsOf(Optimizer optimizer, bool centered);

const char* toString(MessageKind kind);
const char* toString(Mode mode);
const char* toString(Optimizer optimizer);

// "" when `b` agrees with `a`, else which field differs and both values.
std::string registrationDifference(const Registration& a, const Registration& b);

}  // namespace hora::ps
