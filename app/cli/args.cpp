// The headless subcommands' argument parser (see args.h). Every error is one line that names the
// command and the option, so scripts can show it as is (trace-format.md §4).
#include "app/cli/args.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

namespace hl::cli {

const std::string& ParsedArgs::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) throw UsageError("missing option --" + name);
  return it->second;
}

std::string ParsedArgs::getOr(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t ParsedArgs::getInt(const std::string& name, int64_t lo, int64_t hi) const {
  return parseInt(get(name), lo, hi, "--" + name);
}

int64_t ParsedArgs::getIntOr(const std::string& name, int64_t fallback, int64_t lo, int64_t hi) const {
  return has(name) ? getInt(name, lo, hi) : fallback;
}

int64_t parseInt(const std::string& text, int64_t lo, int64_t hi, const std::string& what) {
  int64_t v = 0;
  const char* b = text.data();
  const char* e = b + text.size();
  if (b != e && *b == '+') ++b;  // from_chars accepts '-' but not '+'
  auto [ptr, ec] = std::from_chars(b, e, v);
  if (text.empty() || ec != std::errc() || ptr != e || v < lo || v > hi) {
    throw UsageError(what + ": expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got '" +
                     text + "'");
  }
  return v;
}

uint64_t parseByteSize(const std::string& text, const std::string& what) {
  auto bad = [&]() {
    return UsageError(what + ": expected a size in bytes such as 4096, 512M or 16G (suffixes K, M, G, T), got '" +
                      text + "'");
  };
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 15) throw bad();  // 15 digits: no overflow before the suffix
  uint64_t v = std::stoull(text.substr(0, digits));
  std::string suffix = text.substr(digits);
  for (char& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (suffix.size() >= 2 && suffix.back() == 'B') suffix.pop_back();  // "GB", "GiB" → "G", "Gi"
  if (suffix.size() == 2 && suffix.back() == 'I') suffix.pop_back();  // "Gi" → "G"
  int shift = 0;
  if (suffix == "K")
    shift = 10;
  else if (suffix == "M")
    shift = 20;
  else if (suffix == "G")
    shift = 30;
  else if (suffix == "T")
    shift = 40;
  else if (!suffix.empty() && suffix != "B")
    throw bad();  // units are binary: 1K = 1024 bytes
  if (v == 0 || v > (uint64_t{1} << (62 - shift))) throw bad();
  return v << shift;
}

void requireOneOf(const ParsedArgs& a, const std::string& x, const std::string& y, const std::string& missing) {
  if (a.has(x) == a.has(y)) throw UsageError(a.has(x) ? "--" + x + " and --" + y + " exclude each other" : missing);
}

ArgParser::ArgParser(std::string command, std::string synopsis, std::string summary)
    : command_(std::move(command)), synopsis_(std::move(synopsis)), summary_(std::move(summary)) {}

ArgParser& ArgParser::flag(const std::string& name, const std::string& help) {
  specs_.push_back({name, "", help, false});
  return *this;
}

ArgParser& ArgParser::option(const std::string& name, const std::string& valueName, const std::string& help,
                             bool required) {
  specs_.push_back({name, valueName, help, required});
  return *this;
}

const OptionSpec* ArgParser::find(const std::string& name) const {
  for (const auto& s : specs_)
    if (s.name == name) return &s;
  return nullptr;
}

ParsedArgs ArgParser::parse(const std::vector<std::string>& args) const {
  ParsedArgs out;
  for (const auto& a : args) {
    if (a == "--help" || a == "-h") {
      out.help_ = true;
      return out;
    }
  }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) {
      throw UsageError("unexpected argument '" + a + "' (options start with --; see hybridlens " + command_ +
                       " --help)");
    }
    std::string name = a.substr(2);
    std::string value;
    bool inlineValue = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      inlineValue = true;
    }
    const OptionSpec* spec = find(name);
    if (!spec) throw UsageError("unknown option --" + name + " (see hybridlens " + command_ + " --help)");
    if (out.values_.count(name)) throw UsageError("option --" + name + " given more than once");
    if (spec->valueName.empty()) {
      if (inlineValue) throw UsageError("option --" + name + " takes no value");
    } else if (!inlineValue) {
      // A value may itself start with '-' (a negative number, a prompt), but not with "--".
      if (i + 1 >= args.size() || args[i + 1].compare(0, 2, "--") == 0) {
        throw UsageError("option --" + name + " needs a value " + spec->valueName);
      }
      value = args[++i];
    }
    out.values_[name] = value;
  }
  for (const auto& s : specs_) {
    if (s.required && !out.values_.count(s.name)) {
      throw UsageError("missing option --" + s.name + " " + s.valueName + " (see hybridlens " + command_ + " --help)");
    }
  }
  return out;
}

std::string ArgParser::usage() const {
  std::ostringstream os;
  os << "usage: hybridlens " << command_ << " " << synopsis_ << "\n\n" << summary_ << "\n\noptions:\n";
  size_t width = 0;
  for (const auto& s : specs_) width = std::max(width, s.name.size() + s.valueName.size() + 3);
  for (const auto& s : specs_) {
    std::string left = "--" + s.name + (s.valueName.empty() ? "" : " " + s.valueName);
    os << "  " << left << std::string(width - left.size() + 2, ' ') << s.help << (s.required ? " (required)" : "")
       << "\n";
  }
  os << "  --help" << std::string(width > 6 ? width - 6 + 2 : 2, ' ') << "show this help\n";
  return os.str();
}

}  // namespace hl::cli
