// A small command-line parser for the headless subcommands: `--name VALUE`, `--name=VALUE` and
// `--flag`, with one-line errors for unknown, repeated, missing or malformed options.
// Not a general getopt: no short options, no positional arguments, no option bundling.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace hl::cli {

// A mistake in the command line (as opposed to bad input files). main() prints it on one line.
class UsageError : public hl::Error {
 public:
  using hl::Error::Error;
};

struct OptionSpec {
  std::string name;       // without the leading "--"
  std::string valueName;  // empty for a flag
  std::string help;
  bool required = false;
};

class ParsedArgs {
 public:
  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // The option's value; throws UsageError when it was not given.
  const std::string& get(const std::string& name) const;
  std::string getOr(const std::string& name, const std::string& fallback) const;
  // An integer in [lo, hi]; throws UsageError naming the option and the range.
  int64_t getInt(const std::string& name, int64_t lo, int64_t hi) const;
  int64_t getIntOr(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const;
  bool helpRequested() const { return help_; }

 private:
  friend class ArgParser;
  std::map<std::string, std::string> values_;  // flags map to ""
  bool help_ = false;
};

class ArgParser {
 public:
  // `command` is the subcommand name ("trace"); `synopsis` the one-line usage after it.
  ArgParser(std::string command, std::string synopsis, std::string summary);
  ArgParser& flag(const std::string& name, const std::string& help);
  ArgParser& option(const std::string& name, const std::string& valueName, const std::string& help,
                    bool required = false);
  // Parses the arguments after the subcommand. `--help` / `-h` anywhere sets helpRequested() and
  // skips the other checks. Throws UsageError.
  ParsedArgs parse(const std::vector<std::string>& args) const;
  std::string usage() const;
  const std::string& command() const { return command_; }

 private:
  const OptionSpec* find(const std::string& name) const;
  std::string command_, synopsis_, summary_;
  std::vector<OptionSpec> specs_;
};

// Parses a decimal integer (optional sign) in [lo, hi]; `what` names it in the message.
int64_t parseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what);
// Parses a byte count: a positive integer with an optional binary suffix K, M, G or T (also KB/KiB
// and so on, case-insensitive; 1K = 1024), e.g. "4096", "512M", "16GiB". Throws UsageError naming `what`.
uint64_t parseByteSize(const std::string& text, const std::string& what);
// Exactly one of --`x` / --`y`: throws UsageError "--x and --y exclude each other" when both are
// given, `missing` when neither is.
void requireOneOf(const ParsedArgs& a, const std::string& x, const std::string& y, const std::string& missing);

}  // namespace hl::cli
