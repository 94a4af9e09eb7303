#pragma once
/// \file
/// One strict JSON (RFC 8259) reader, shared by the safetensors header reader
/// (io/safetensors.hpp) and the Hugging Face config.json reader
/// (encoding/rotary/hf_config.hpp): a recursive-descent parser into a small value tree.

#include <algorithm>
#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "../core/error.hpp"

namespace posenc {
namespace io {
namespace detail {

/// A parsed JSON value (RFC 8259).
struct json_value {
  enum class kind { null, boolean, number, string, array, object };
  kind k = kind::null;
  bool b = false;
  std::string text;               ///< string contents (UTF-8) or the number's literal text
  std::vector<json_value> items;  ///< array elements, or object values
  std::vector<std::string> keys;  ///< object keys, parallel to items
};

/// A strict recursive-descent JSON parser over a complete text: RFC 8259 grammar only (no
/// trailing commas, comments, leading '+' or '.', unknown escapes), nesting at most 64 deep,
/// duplicate object keys are errors, and nothing but white space may follow the document.
/// Every defect goes to the caller's `on_error(what, byte offset)`, which throws the caller's
/// own posenc::error (the files that use it word their messages differently).
class json_parser {
 public:
  using error_handler = std::function<void(const std::string& what, std::size_t offset)>;

  json_parser(std::string_view s, error_handler on_error) : s_(s), on_error_(std::move(on_error)) {}

  /// The whole text as one value; `trailing` words the error for anything after it.
  json_value parse_document(const char* trailing = "trailing characters after the JSON document") {
    json_value v = parse_value(0);
    skip_ws();
    if (i_ != s_.size()) bad(trailing);
    return v;
  }

 private:
  static constexpr int max_depth = 64;

  [[noreturn]] void bad(const std::string& what) const {
    on_error_(what, i_);
    // Only reached when the handler returns instead of throwing.
    posenc::detail::fail("json", "offset", i_, what);
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  bool at_end() const { return i_ >= s_.size(); }

  json_value parse_value(int depth) {
    if (depth > max_depth) bad("nesting deeper than 64");
    skip_ws();
    if (at_end()) bad("unexpected end of the header");
    const char c = peek();
    json_value v;
    if (c == '{') {
      v.k = json_value::kind::object;
      ++i_;
      skip_ws();
      if (peek() == '}') {
        ++i_;
        return v;
      }
      for (;;) {
        skip_ws();
        if (peek() != '"') bad("expected a string key");
        std::string key = parse_string();
        if (std::find(v.keys.begin(), v.keys.end(), key) != v.keys.end())
          bad("duplicate key \"" + key + "\"");
        skip_ws();
        if (peek() != ':') bad("expected ':'");
        ++i_;
        v.items.push_back(parse_value(depth + 1));
        v.keys.push_back(std::move(key));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == '}') {
          ++i_;
          return v;
        }
        bad("expected ',' or '}'");
      }
    }
    if (c == '[') {
      v.k = json_value::kind::array;
      ++i_;
      skip_ws();
      if (peek() == ']') {
        ++i_;
        return v;
      }
      for (;;) {
        v.items.push_back(parse_value(depth + 1));
        skip_ws();
        if (peek() == ',') {
          ++i_;
          continue;
        }
        if (peek() == ']') {
          ++i_;
          return v;
        }
        bad("expected ',' or ']'");
      }
    }
    if (c == '"') {
      v.k = json_value::kind::string;
      v.text = parse_string();
      return v;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      v.k = json_value::kind::number;
      v.text = parse_number();
      return v;
    }
    if (s_.compare(i_, 4, "true") == 0) {
      i_ += 4;
      v.k = json_value::kind::boolean;
      v.b = true;
      return v;
    }
    if (s_.compare(i_, 5, "false") == 0) {
      i_ += 5;
      v.k = json_value::kind::boolean;
      return v;
    }
    if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      return v;
    }
    bad("unexpected character");
  }

  std::string parse_number() {
    const std::size_t start = i_;
    const auto digits = [&] {
      const std::size_t d0 = i_;
      while (peek() >= '0' && peek() <= '9') ++i_;
      return i_ - d0;
    };
    if (peek() == '-') ++i_;
    if (peek() == '0') {
      ++i_;
    } else if (digits() == 0) {
      bad("malformed number");
    }
    if (peek() == '.') {
      ++i_;
      if (digits() == 0) bad("malformed number");
    }
    if (peek() == 'e' || peek() == 'E') {
      ++i_;
      if (peek() == '+' || peek() == '-') ++i_;
      if (digits() == 0) bad("malformed number");
    }
    return std::string(s_.substr(start, i_ - start));
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) bad("truncated \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9')
        v |= static_cast<unsigned>(h - '0');
      else if (h >= 'a' && h <= 'f')
        v |= static_cast<unsigned>(h - 'a' + 10);
      else if (h >= 'A' && h <= 'F')
        v |= static_cast<unsigned>(h - 'A' + 10);
      else
        bad("bad hex digit in a \\u escape");
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string parse_string() {
    ++i_;  // opening quote
    std::string out;
    for (;;) {
      if (at_end()) bad("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) bad("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (at_end()) bad("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xDC00 && cp <= 0xDFFF) bad("lone low surrogate in a \\u escape");
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (s_.compare(i_, 2, "\\u") != 0) bad("high surrogate without its low half");
            i_ += 2;
            const unsigned lo = hex4();
            if (lo < 0xDC00 || lo > 0xDFFF) bad("high surrogate without its low half");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          bad(std::string("unknown escape \\") + e);
      }
    }
  }

  std::string_view s_;
  error_handler on_error_;
  std::size_t i_ = 0;
};

}  // namespace detail
}  // namespace io
}  // namespace posenc
