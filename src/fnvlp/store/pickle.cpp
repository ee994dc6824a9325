#include "fnvlp/store/pickle.hpp"

#include <cstring>
#include <deque>
#include <map>
#include <unordered_map>

#include "fnvlp/core/error.hpp"

namespace fnvlp::store {

int pickled_element_size(const std::string& storage_type) {
  static const std::map<std::string, int> sizes = {
      {"torch.FloatStorage", 4},  {"torch.HalfStorage", 2}, {"torch.BFloat16Storage", 2},
      {"torch.DoubleStorage", 8}, {"torch.LongStorage", 8}, {"torch.IntStorage", 4},
      {"torch.ShortStorage", 2},  {"torch.CharStorage", 1}, {"torch.ByteStorage", 1},
      {"torch.BoolStorage", 1}};
  const auto it = sizes.find(storage_type);
  return it == sizes.end() ? 0 : it->second;
}

namespace {

struct Value;
// Values live in the machine's arena: a pickle may make a list that contains itself (APPEND of
// a memo entry), which reference counting would leak.
using V = Value*;

struct Value {
  enum Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kStr,
    kBytes,
    kList,
    kTuple,
    kDict,
    kGlobal,
    kStorage,
    kTensor,
    kObject
  };
  Kind kind = kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;  // kStr, kBytes; kGlobal "module.name"; kObject its class
  std::vector<V> items;
  std::vector<std::pair<V, V>> dict;
  PickledTensor tensor;  // kStorage: storage, storage_type, storage_numel; kTensor: all but name
};

// The pickle machine over data.pkl's bytes.
class Unpickler {
 public:
  Unpickler(const std::string& file, const std::string& bytes) : file_(file), b_(bytes) {}

  V run() {
    for (;;) {
      const auto op = static_cast<unsigned char>(take(1)[0]);
      switch (op) {
        case 0x80:
          take(1);
          break;  // PROTO
        case 0x95:
          take(8);
          break;     // FRAME
        case '.': {  // STOP
          FNVLP_CHECK(stack_.size() == 1, where() << "STOP with " << stack_.size() << " values");
          return stack_.back();
        }
        case '(':
          marks_.push_back(stack_.size());
          break;  // MARK
        case 'N':
          push(make(Value::kNone));
          break;
        case 0x88:
        case 0x89: {  // NEWTRUE, NEWFALSE
          auto v = make(Value::kBool);
          v->i = op == 0x88;
          push(v);
          break;
        }
        case 'J':
          push_int(static_cast<int32_t>(le(4)));
          break;  // BININT
        case 'K':
          push_int(static_cast<int64_t>(le(1)));
          break;  // BININT1
        case 'M':
          push_int(static_cast<int64_t>(le(2)));
          break;      // BININT2
        case 0x8a: {  // LONG1
          const auto n = static_cast<size_t>(le(1));
          FNVLP_CHECK(n <= 8, where() << "integer of " << n << " bytes");
          uint64_t u = n ? le(n) : 0;
          if (n > 0 && n < 8 && (u >> (8 * n - 1)) & 1) u |= ~0ull << (8 * n);  // sign
          push_int(static_cast<int64_t>(u));
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          const std::string s = take(8);
          uint64_t u = 0;
          for (char c : s) u = (u << 8) | static_cast<unsigned char>(c);
          auto v = make(Value::kFloat);
          std::memcpy(&v->f, &u, 8);
          push(v);
          break;
        }
        case 'X':
          push_str(Value::kStr, le(4));
          break;  // BINUNICODE
        case 0x8c:
          push_str(Value::kStr, le(1));
          break;  // SHORT_BINUNICODE
        case 0x8d:
          push_str(Value::kStr, le(8));
          break;  // BINUNICODE8
        case 'B':
          push_str(Value::kBytes, le(4));
          break;  // BINBYTES
        case 'C':
          push_str(Value::kBytes, le(1));
          break;  // SHORT_BINBYTES
        case 0x8e:
          push_str(Value::kBytes, le(8));
          break;  // BINBYTES8
        case 'T':
          push_str(Value::kBytes, le(4));
          break;  // BINSTRING
        case 'U':
          push_str(Value::kBytes, le(1));
          break;  // SHORT_BINSTRING
        case '}':
        case 'd': {  // EMPTY_DICT, DICT
          auto v = make(Value::kDict);
          if (op == 'd') {
            auto items = pop_mark();
            FNVLP_CHECK(items.size() % 2 == 0, where() << "DICT with an odd number of items");
            for (size_t k = 0; k < items.size(); k += 2)
              v->dict.emplace_back(items[k], items[k + 1]);
          }
          push(v);
          break;
        }
        case ']':
          push(make(Value::kList));
          break;     // EMPTY_LIST
        case 'l': {  // LIST
          auto v = make(Value::kList);
          v->items = pop_mark();
          push(v);
          break;
        }
        case ')':
          push(make(Value::kTuple));
          break;     // EMPTY_TUPLE
        case 't': {  // TUPLE
          auto v = make(Value::kTuple);
          v->items = pop_mark();
          push(v);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const size_t n = op - 0x84u;
          need_stack(n);
          auto v = make(Value::kTuple);
          v->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(v);
          break;
        }
        case 'a': {  // APPEND
          auto x = pop();
          container(Value::kList)->items.push_back(x);
          break;
        }
        case 'e': {  // APPENDS
          auto xs = pop_mark();
          auto& l = container(Value::kList)->items;
          l.insert(l.end(), xs.begin(), xs.end());
          break;
        }
        case 's': {  // SETITEM
          auto value = pop();
          auto key = pop();
          container(Value::kDict)->dict.emplace_back(key, value);
          break;
        }
        case 'u': {  // SETITEMS
          auto xs = pop_mark();
          FNVLP_CHECK(xs.size() % 2 == 0, where() << "SETITEMS with an odd number of items");
          auto& d = container(Value::kDict)->dict;
          for (size_t k = 0; k < xs.size(); k += 2) d.emplace_back(xs[k], xs[k + 1]);
          break;
        }
        case 'q':
          memo_[le(1)] = top();
          break;  // BINPUT
        case 'r':
          memo_[le(4)] = top();
          break;  // LONG_BINPUT
        case 0x94:
          memo_[memo_.size()] = top();
          break;  // MEMOIZE
        case 'h':
        case 'j': {  // BINGET, LONG_BINGET
          const uint64_t k = le(op == 'h' ? 1 : 4);
          const auto it = memo_.find(k);
          FNVLP_CHECK(it != memo_.end(), where() << "memo entry " << k << " was never stored");
          push(it->second);
          break;
        }
        case '0':
          pop();
          break;  // POP
        case '1':
          pop_mark();
          break;  // POP_MARK
        case '2':
          push(top());
          break;     // DUP
        case 'c': {  // GLOBAL
          auto v = make(Value::kGlobal);
          v->s = line() + ".";
          v->s += line();
          push(v);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop(), module = pop();
          FNVLP_CHECK(name->kind == Value::kStr && module->kind == Value::kStr,
                      where() << "STACK_GLOBAL of non-strings");
          auto v = make(Value::kGlobal);
          v->s = module->s + "." + name->s;
          push(v);
          break;
        }
        case 'Q':
          push(persistent(pop()));
          break;     // BINPERSID
        case 'R': {  // REDUCE
          auto args = pop();
          auto fn = pop();
          push(reduce(fn, args));
          break;
        }
        case 0x81: {  // NEWOBJ
          pop();
          auto cls = pop();
          auto v = make(Value::kObject);
          v->s = cls->kind == Value::kGlobal ? cls->s : "?";
          push(v);
          break;
        }
        case 'b':
          pop();
          need_stack(1);
          break;  // BUILD: the state is not applied
        default:
          FNVLP_FAIL(where() << "pickle opcode 0x" << std::hex << static_cast<int>(op) << std::dec
                             << " is not one torch.save writes");
      }
    }
  }

 private:
  V make(Value::Kind k) {
    arena_.emplace_back();
    arena_.back().kind = k;
    return &arena_.back();
  }
  std::string where() const { return file_ + ": data.pkl at byte " + std::to_string(pos_) + ": "; }
  std::string take(size_t n) {
    FNVLP_CHECK(n <= b_.size() - pos_, where() << "pickle ends inside an opcode");
    std::string s = b_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(size_t n) {
    FNVLP_CHECK(n <= b_.size() - pos_, where() << "pickle ends inside an opcode");
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | static_cast<unsigned char>(b_[pos_ + k]);
    pos_ += n;
    return v;
  }
  std::string line() {
    const size_t nl = b_.find('\n', pos_);
    FNVLP_CHECK(nl != std::string::npos, where() << "GLOBAL without its newline");
    std::string s = b_.substr(pos_, nl - pos_);
    pos_ = nl + 1;
    return s;
  }
  void push(V v) { stack_.push_back(std::move(v)); }
  void push_int(int64_t i) {
    auto v = make(Value::kInt);
    v->i = i;
    push(v);
  }
  void push_str(Value::Kind k, uint64_t n) {
    FNVLP_CHECK(n <= b_.size() - pos_, where()
                                           << "a string of " << n << " bytes runs past the end");
    auto v = make(k);
    v->s = take(static_cast<size_t>(n));
    push(v);
  }
  void need_stack(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    FNVLP_CHECK(stack_.size() >= floor + n, where() << "stack underflow");
  }
  V pop() {
    need_stack(1);
    V v = stack_.back();
    stack_.pop_back();
    return v;
  }
  V top() {
    need_stack(1);
    return stack_.back();
  }
  std::vector<V> pop_mark() {
    FNVLP_CHECK(!marks_.empty(), where() << "no MARK to pop to");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<V> out(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Value* container(Value::Kind k) {
    V c = top();
    FNVLP_CHECK(
        c->kind == k || (k == Value::kDict && c->kind == Value::kObject),
        where() << "item added to a value that is not a " << (k == Value::kDict ? "dict" : "list"));
    return c;
  }
  // ('storage', torch.XStorage, key, location, numel)
  V persistent(const V& pid) {
    FNVLP_CHECK(pid->kind == Value::kTuple && pid->items.size() >= 5 &&
                    pid->items[0]->kind == Value::kStr && pid->items[0]->s == "storage" &&
                    pid->items[1]->kind == Value::kGlobal && pid->items[2]->kind == Value::kStr &&
                    pid->items[4]->kind == Value::kInt && pid->items[4]->i >= 0 &&
                    pid->items[4]->i < (int64_t{1} << 56),
                where() << "a persistent id that is not a storage");
    auto v = make(Value::kStorage);
    FNVLP_CHECK(pickled_element_size(pid->items[1]->s) > 0,
                file_ << ": storage of type " << pid->items[1]->s << " is not supported");
    v->tensor.storage_type = pid->items[1]->s;
    v->tensor.storage = "data/" + pid->items[2]->s;
    v->tensor.storage_numel = pid->items[4]->i;
    return v;
  }
  V reduce(const V& fn, const V& args, int depth = 0) {
    FNVLP_CHECK(args->kind == Value::kTuple, where() << "REDUCE arguments are not a tuple");
    const std::string f = fn->kind == Value::kGlobal ? fn->s : "";
    const auto& a = args->items;
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      FNVLP_CHECK(a.size() >= 4 && a[0]->kind == Value::kStorage && a[1]->kind == Value::kInt &&
                      a[2]->kind == Value::kTuple && a[3]->kind == Value::kTuple &&
                      a[2]->items.size() == a[3]->items.size(),
                  where() << f << " with unexpected arguments");
      auto v = make(Value::kTensor);
      v->tensor = a[0]->tensor;
      v->tensor.offset = a[1]->i;
      // The largest element index the view reaches must lie in its storage.
      __int128 last = a[1]->i;
      bool empty = false;
      for (size_t d = 0; d < a[2]->items.size(); ++d) {
        const V& sz = a[2]->items[d];
        const V& st = a[3]->items[d];
        FNVLP_CHECK(sz->kind == Value::kInt && st->kind == Value::kInt && sz->i >= 0 &&
                        st->i >= 0 && sz->i < (int64_t{1} << 48) && st->i < (int64_t{1} << 48),
                    where() << "a tensor size or stride out of range");
        v->tensor.size.push_back(sz->i);
        v->tensor.stride.push_back(st->i);
        if (sz->i == 0)
          empty = true;
        else
          last += static_cast<__int128>(sz->i - 1) * st->i;
      }
      FNVLP_CHECK(a[1]->i >= 0 && (empty || last < v->tensor.storage_numel),
                  where() << "a tensor view reaches past its storage of " << v->tensor.storage_numel
                          << " elements");
      return v;
    }
    if (f == "torch._utils._rebuild_parameter" ||
        f == "torch._utils._rebuild_parameter_with_state") {
      FNVLP_CHECK(!a.empty() && a[0]->kind == Value::kTensor, where() << f << " of a non-tensor");
      return a[0];
    }
    if (f == "torch._tensor._rebuild_from_type_v2" && a.size() >= 3) {
      // (func, type, args, state): func(*args); nested only as deep as subclasses go.
      FNVLP_CHECK(depth < 8, where() << "_rebuild_from_type_v2 nested too deeply");
      return reduce(a[0], a[2], depth + 1);
    }
    if (f == "collections.OrderedDict" || f == "builtins.dict") return make(Value::kDict);
    auto v = make(Value::kObject);  // not executed; kept opaque
    v->s = f;
    return v;
  }

  const std::string& file_;
  const std::string& b_;
  size_t pos_ = 0;
  std::vector<V> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, V> memo_;
  std::deque<Value> arena_;  // stable addresses, freed with the machine
};

}  // namespace

std::vector<PickledTensor> read_pickled_state_dict(const std::string& file,
                                                   const std::string& bytes) {
  Unpickler machine(file, bytes);
  const V root = machine.run();
  const auto is_dict = [](const V& v) { return v && v->kind == Value::kDict; };
  FNVLP_CHECK(is_dict(root), file << ": torch.save file holds no dict of tensors");
  V sd = root;
  for (const char* wrapper : {"model", "state_dict", "module"}) {
    for (const auto& [k, v] : root->dict)
      if (k->kind == Value::kStr && k->s == wrapper && is_dict(v)) sd = v;
    if (sd != root) break;
  }
  std::vector<PickledTensor> out;
  for (const auto& [k, v] : sd->dict) {
    if (k->kind != Value::kStr || v->kind != Value::kTensor) continue;
    out.push_back(v->tensor);
    out.back().name = k->s;
  }
  return out;
}

}  // namespace fnvlp::store
