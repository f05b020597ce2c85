// Store: the key-value control plane ranks use to find each other (c10d/gloo style).
//
// Keys are strings; values are byte strings. Every blocking call takes a deadline and throws
// TimeoutError naming the key when it passes. Implementations are thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/deadline.h"

namespace hora::rendezvous {

class Store {
 public:
  virtual ~Store() = default;

  virtual void set(const std::string& key, const std::string& value,
                   const common::Deadline& deadline) = 0;
  // Waits until `key` exists, then returns its value.
  virtual std::string get(const std::string& key, const common::Deadline& deadline) = 0;
  // Returns the value or nullopt at once when the key does not exist.
  virtual std::optional<std::string> tryGet(const std::string& key,
                                            const common::Deadline& deadline) = 0;
  // Adds delta to the integer stored at key (0 when absent) and returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta, const common::Deadline& deadline) = 0;
  // Waits until every key exists.
  virtual void wait(const std::vector<std::string>& keys, const common::Deadline& deadline) = 0;
};

}  // namespace hora::rendezvous
