#include "ps/messages.h"

namespace hora::ps {

const char* toString(MessageKind kind) {
  switch (kind) {
    case MessageKind::kRegister: return "register";
    case MessageKind::kPush: return "push";
    case MessageKind::kReply: return "reply";
    case MessageKind::kError: return "error";
    case MessageKind::kBye: return "bye";
    case MessageKind::kState: return "state request";
  }
  return "unknown message";
}

const char* toString(Mode mode) { return mode == Mode::kSync ? "ps-sync" : mode == Mode::kAsync ? "ps-async" : "?"; }

const char* toString(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::kSgd: return "SGD";
    case Optimizer::kAdam: return "Adam";
    case Optimizer::kAdagrad: return "Adagrad";
    case Optimizer::kRmsprop: return "RMSprop";
    case Optimizer::kAdamax: return "Adamax";
    case Optimizer::kAdadelta: return "Adadelta";
    case Optimizer::kNadam: return "NAdam";
    case Optimizer::kRadam: return "RAdam";
  }
  return "?";
}

uint32_t slotsOf(Optimizer optimizer, bool centered) {
  switch (optimizer) {
    case Optimizer::kSgd: return 1;
    case Optimizer::kAdam: return 2;
    case Optimizer::kAdagrad: return 1;
    case Optimizer::kRmsprop: return centered ? 3 : 2;
    case Optimizer::kAdamax: return 2;
    case Optimizer::kAdadelta: return 2;
    case Optimizer::kNadam: return 2;
    case Optimizer::kRadam: return 2;
  }
  return 0;
}

std::string registrationDifference(const Registration& a, const Registration& b) {
  const auto differs = [](const char* field, auto x, auto y) {
    return std::string(field) + " " + std::to_string(y) + " where the first worker gave " + std::to_string(x);
  };
  if (a.mode != b.mode) return std::string("mode ") + toString(b.mode) + " where the first worker gave " + toString(a.mode);
  if (a.workers != b.workers) return differs("number of workers", a.workers, b.workers);
  if (a.layout_hash != b.layout_hash || a.shard_elements != b.shard_elements || a.wide_elements != b.wide_elements)
    return differs("tensors (shard elements)", a.shard_elements, b.shard_elements) + " or other tensor sizes or dtypes";
  if (a.average != b.average) return differs("average", a.average, b.average);
  if (a.fp16 != b.fp16) return differs("fp16 (compression)", a.fp16, b.fp16);
  if (a.max_staleness != b.max_staleness) return differs("max_staleness", a.max_staleness, b.max_staleness);
  if (a.lr != b.lr) return differs("lr", a.lr, b.lr);
  if (a.momentum != b.momentum) return differs("momentum", a.momentum, b.momentum);
  if (a.keras_form != b.keras_form) return differs("keras_form", a.keras_form, b.keras_form);
  if (a.optimizer != b.optimizer)
    return std::string("optimizer ") + toString(b.optimizer) + " where the first worker gave " + toString(a.optimizer);
  if (a.beta1 != b.beta1) return differs("beta1", a.beta1, b.beta1);
  if (a.beta2 != b.beta2) return differs("beta2", a.beta2, b.beta2);
  if (a.epsilon != b.epsilon) return differs("epsilon", a.epsilon, b.epsilon);
  if (a.centered != b.centered) return differs("centered", a.centered, b.centered);
  if (a.lr_decay != b.lr_decay) return differs("lr_decay (NAdam: momentum_decay)", a.lr_decay, b.lr_decay);
  if (a.nadam_twice != b.nadam_twice) return differs("NAdam's form (1: torch < 2.0)", a.nadam_twice, b.nadam_twice);
  if (a.weight_decay != b.weight_decay) return differs("weight_decay", a.weight_decay, b.weight_decay);
  if (a.decoupled_weight_decay != b.decoupled_weight_decay)
    return differs("decoupled weight decay", a.decoupled_weight_decay, b.decoupled_weight_decay);
  if (a.initial_accumulator != b.initial_accumulator)
    return differs("initial_accumulator_value", a.initial_accumulator, b.initial_accumulator);
  return "";
}

}  // namespace hora::ps
