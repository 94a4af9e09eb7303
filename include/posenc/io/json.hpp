#pragma once
/// \file
/// One strict JSON (RFC 8259) reader, shared by the safetensors header reader
/// (io/safetensors.hpp) and the Hugging Face config.json reader
/// (encoding/rotary/hf_config.hpp).
///
/// Two ways to use it, over the same grammar code:
///
///     parse_document()      validate_document(), then the whole text as a json_value tree
///     validate_document()   checks the text without building anything, then a cursor
///                           (enter_object / read_key / next_member / enter_array /
///                           next_element / read_string / read_number / skip_value, seek)
///                           reads the parts the caller wants in place
///
/// The cursor is what the safetensors reader uses: a tree of a 100 MB header would take
/// tens of times its size in memory (a json_value is ~90 bytes, and `[0,0,...]` spends two
/// bytes of text per value), the cursor takes nothing beyond what the caller keeps.

#include <algorithm>
#include <array>
#include <cstddef>
#include <forward_list>
#include <functional>
#include <set>
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
  std::vector<std::string> keys;  ///< object keys in document order, parallel to items
};

/// A strict recursive-descent JSON parser over a complete text: RFC 8259 grammar only (no
/// trailing commas, comments, leading '+' or '.', unknown escapes), nesting at most 64 deep,
/// duplicate object keys are errors, and nothing but white space may follow the document.
/// Every defect goes to the caller's `on_error(what, byte offset)`, which throws the caller's
/// own posenc::error (the files that use it word their messages differently).
///
/// Cost: validation is O(n log k) for a text of n bytes whose objects have at most k keys
/// (duplicate keys are found with an ordered set once an object has more than 8 keys), and
/// its memory is the key set of the objects being read (at most 64 open at a time): about
/// 64 bytes per key of the largest object, none of the values.
class json_parser {
 public:
  using error_handler = std::function<void(const std::string& what, std::size_t offset)>;
  using kind = json_value::kind;

  /// Nesting limit: a value inside 64 arrays or objects is an error.
  static constexpr int max_depth = 64;

  json_parser(std::string_view s, error_handler on_error) : s_(s), on_error_(std::move(on_error)) {}

  /// Checks the whole text (grammar, nesting, duplicate keys, nothing but white space after
  /// the value; `trailing` words that last error) without building it, and leaves the
  /// cursor at the end. Reported defects and their offsets are those parse_document reports.
  void validate_document(const char* trailing = "trailing characters after the JSON document") {
    i_ = 0;
    walk_value(0, true);
    skip_ws();
    if (i_ != s_.size()) bad(trailing);
  }

  /// The whole text as one value (validate_document first; `trailing` as there).
  json_value parse_document(const char* trailing = "trailing characters after the JSON document") {
    validate_document(trailing);
    i_ = 0;
    return read_value(0);
  }

  // -------------------------------------------------------------------------------------
  // The cursor, for a text validate_document accepted: it walks values in place. Each call
  // also checks the grammar it reads and skip_value the nesting (so no call reads out of
  // bounds or recurses without limit whatever the text), but duplicate keys and trailing
  // text are validate_document's job.

  /// Byte offset of the cursor.
  std::size_t offset() const noexcept { return i_; }
  /// Moves the cursor to byte `at` (an offset() seen before).
  void seek(std::size_t at) noexcept { i_ = std::min(at, s_.size()); }

  /// The kind of the value at the cursor (white space skipped), read from its first byte.
  kind next_kind() {
    skip_ws();
    if (at_end()) bad("unexpected end of the header");
    switch (peek()) {
      case '{':
        return kind::object;
      case '[':
        return kind::array;
      case '"':
        return kind::string;
      case 't':
      case 'f':
        return kind::boolean;
      case 'n':
        return kind::null;
      default:
        return kind::number;
    }
  }

  /// Consumes the '{' of an object; false (and the '}' consumed) when it is empty, else
  /// read_key() comes next.
  bool enter_object() { return enter('{', '}', "expected '{'"); }

  /// A member's key and its ':'; the value comes next. The view is into the text, or into
  /// `scratch` when the key has escapes: valid until the next read with the same scratch.
  std::string_view read_key(std::string& scratch) {
    const std::string_view key = lex_key(scratch);
    expect_colon();
    return key;
  }

  /// After a member's value: true (the ',' consumed) when another member follows, false
  /// (the '}' consumed) at the end of the object.
  bool next_member() { return next('}', "expected ',' or '}'"); }

  /// Consumes the '[' of an array; false (and the ']' consumed) when it is empty, else an
  /// element comes next.
  bool enter_array() { return enter('[', ']', "expected '['"); }

  /// After an element: true (the ',' consumed) when another follows, false (the ']'
  /// consumed) at the end of the array.
  bool next_element() { return next(']', "expected ',' or ']'"); }

  /// The string at the cursor, decoded; a view into the text, or into `scratch` when it has
  /// escapes.
  std::string_view read_string(std::string& scratch) {
    skip_ws();
    if (peek() != '"') bad("expected a string");
    return lex_string(scratch);
  }

  /// The literal text of the number at the cursor (a view into the text).
  std::string_view read_number() {
    skip_ws();
    return lex_number();
  }

  /// Steps over the value at the cursor, whatever it is.
  void skip_value() { walk_value(0, false); }

 private:
  // enter_object / enter_array: the opening bracket, then false (the closing one
  // consumed) for an empty container
  bool enter(char open, char close, const char* expected) {
    skip_ws();
    if (peek() != open) bad(expected);
    ++i_;
    skip_ws();
    if (peek() == close) {
      ++i_;
      return false;
    }
    return true;
  }

  // next_member / next_element: true after a ',', false after the closing bracket
  bool next(char close, const char* expected) {
    skip_ws();
    if (peek() == ',') {
      ++i_;
      return true;
    }
    if (peek() == close) {
      ++i_;
      return false;
    }
    bad(expected);
  }
  /// Keys seen in one object: eight inline, then an ordered set (no hash to attack).
  class key_set {
   public:
    /// Adds `key` (kept as a view: `owned` escapes are copied here); false when present.
    bool insert(std::string_view key, bool owned) {
      if (owned) {
        copies_.emplace_front(key);
        key = copies_.front();
      }
      if (n_ < small_.size()) {
        if (std::find(small_.begin(), small_.begin() + static_cast<std::ptrdiff_t>(n_), key) !=
            small_.begin() + static_cast<std::ptrdiff_t>(n_))
          return false;
        small_[n_++] = key;
        return true;
      }
      if (index_.empty()) index_.insert(small_.begin(), small_.end());
      return index_.insert(key).second;
    }

   private:
    std::array<std::string_view, 8> small_{};
    std::size_t n_ = 0;
    std::set<std::string_view> index_;
    std::forward_list<std::string> copies_;
  };

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

  /// A key (white space before it skipped), without the ':' after it.
  std::string_view lex_key(std::string& scratch) {
    skip_ws();
    if (peek() != '"') bad("expected a string key");
    return lex_string(scratch);
  }
  void expect_colon() {
    skip_ws();
    if (peek() != ':') bad("expected ':'");
    ++i_;
  }

  /// The one grammar walk: checks the value at the cursor (nesting counted from `depth`)
  /// and steps over it; with `strict` also duplicate keys (what validate_document adds).
  void walk_value(int depth, bool strict) {
    if (depth > max_depth) bad("nesting deeper than 64");
    skip_ws();
    if (at_end()) bad("unexpected end of the header");
    const char c = peek();
    if (c == '{') {
      if (!enter_object()) return;
      key_set seen;
      std::string scratch;
      do {
        const std::string_view key = lex_key(scratch);
        if (strict && !seen.insert(key, key.data() == scratch.data()))
          bad("duplicate key \"" + std::string(key) + "\"");
        expect_colon();
        walk_value(depth + 1, strict);
      } while (next_member());
      return;
    }
    if (c == '[') {
      if (!enter_array()) return;
      do walk_value(depth + 1, strict);
      while (next_element());
      return;
    }
    if (c == '"') {
      std::string scratch;
      (void)lex_string(scratch);
      return;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      (void)lex_number();
      return;
    }
    (void)lex_literal();
  }

  /// true, false or null at the cursor: its kind and, for a boolean, its value.
  std::pair<kind, bool> lex_literal() {
    if (s_.compare(i_, 4, "true") == 0) {
      i_ += 4;
      return {kind::boolean, true};
    }
    if (s_.compare(i_, 5, "false") == 0) {
      i_ += 5;
      return {kind::boolean, false};
    }
    if (s_.compare(i_, 4, "null") == 0) {
      i_ += 4;
      return {kind::null, false};
    }
    bad("unexpected character");
  }

  /// The tree of the value at the cursor (of a validated text).
  json_value read_value(int depth) {
    json_value v;
    v.k = next_kind();
    std::string scratch;
    switch (v.k) {
      case kind::object:
        if (!enter_object()) break;
        do {
          v.keys.emplace_back(read_key(scratch));
          v.items.push_back(read_value(depth + 1));
        } while (next_member());
        break;
      case kind::array:
        if (!enter_array()) break;
        do v.items.push_back(read_value(depth + 1));
        while (next_element());
        break;
      case kind::string:
        v.text = std::string(lex_string(scratch));
        break;
      case kind::number:
        if (peek() != '-' && (peek() < '0' || peek() > '9')) bad("unexpected character");
        v.text = std::string(lex_number());
        break;
      default: {
        const auto lit = lex_literal();
        v.k = lit.first;
        v.b = lit.second;
      }
    }
    return v;
  }

  std::string_view lex_number() {
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
    return s_.substr(start, i_ - start);
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

  /// The string at the cursor (its opening quote): a view into the text when it has no
  /// escapes, else decoded into `scratch` (overwritten) and a view of that.
  std::string_view lex_string(std::string& scratch) {
    ++i_;  // opening quote
    const std::size_t start = i_;
    for (;;) {
      if (at_end()) bad("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return s_.substr(start, i_ - 1 - start);
      if (c == '\\') {
        --i_;
        break;
      }
      if (static_cast<unsigned char>(c) < 0x20) bad("raw control character in a string");
    }
    // An escape: decode from here on into scratch.
    scratch.assign(s_.data() + start, i_ - start);
    for (;;) {
      if (at_end()) bad("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return scratch;
      if (static_cast<unsigned char>(c) < 0x20) bad("raw control character in a string");
      if (c != '\\') {
        scratch += c;
        continue;
      }
      if (at_end()) bad("unterminated escape");
      const char e = s_[i_++];
      switch (e) {
        case '"':
          scratch += '"';
          break;
        case '\\':
          scratch += '\\';
          break;
        case '/':
          scratch += '/';
          break;
        case 'b':
          scratch += '\b';
          break;
        case 'f':
          scratch += '\f';
          break;
        case 'n':
          scratch += '\n';
          break;
        case 'r':
          scratch += '\r';
          break;
        case 't':
          scratch += '\t';
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
          append_utf8(scratch, cp);
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
