// Error types of the engine: every failure of untrusted input is a LoadError with a message that
// names the file, the object and the allowed range (DESIGN.md, reliability rules). Nothing here aborts.
// Not for programming errors inside the engine: those are asserts in debug builds.
#pragma once
#include <stdexcept>
#include <string>

namespace hl {

// Any error the engine reports to a user (bad arguments, unavailable backend, limits reached).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Malformed or unreadable input: checkpoints, configs, adapters, tokenizers, sessions, traces.
class LoadError : public Error {
 public:
  using Error::Error;
};

// The load or run was cancelled by the user.
class Cancelled : public Error {
 public:
  Cancelled() : Error("cancelled") {}
};

}  // namespace hl
