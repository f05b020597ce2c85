// Assertions about the typed errors of the public API, shared by the test files.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "hora/errors.h"

namespace hora::testing {

// Fails the current test unless f() throws InvalidArgumentError whose message contains `needle`.
template <typename F>
void expectInvalid(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no InvalidArgumentError (wanted one mentioning '" << needle << "')";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace hora::testing
