// Readers' error messages in tests: `read()` must throw E saying exactly `message`.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace driftcheck::testing {

template <class E, class F>
void expect_error_message(F&& read, const std::string& message) {
  try {
    read();
    ADD_FAILURE() << "no error, expected: " << message;
  } catch (const E& e) {
    EXPECT_EQ(std::string(e.what()), message);
  }
}

}  // namespace driftcheck::testing
