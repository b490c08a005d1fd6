// oneDNN matmul as the GEMM peer (onednn_peer.h). Uses the oneDNN 2.x C++ API as shipped by
// Debian's libdnnl-dev 2.6: static output scales and zero points in the primitive attributes
// (the values are known at creation, as FBGEMM's and our plans know them), weights in the
// layout the primitive asks for (format_tag::any + one untimed reorder).
#include "driver/onednn_peer.h"

#include <dlfcn.h>

#include <vector>

#include "driver/timing.h"

#if defined(QJ_HAVE_ONEDNN)
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace bench {

#if defined(QJ_HAVE_ONEDNN)

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

class OneDnnMatmul : public GemmPeer {
 public:
  bool run() override {
    try {
      prim_.execute(stream_, args_);
      stream_.wait();
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }
  std::string name() const override { return "onednn"; }
  std::string impl() const override { return impl_; }

  // Builds the primitive for the given descriptors and binds user pointers; weights are
  // reordered from the user's plain K x N layout into the primitive's preferred one.
  bool init(const dnnl::memory::desc& a_md, const dnnl::memory::desc& b_user_md,
            const dnnl::memory::desc& b_any_md, const dnnl::memory::desc* bias_md,
            const dnnl::memory::desc& c_md, const dnnl::primitive_attr& attr, const void* a,
            const void* b, const void* bias, void* c, std::string* err) {
    try {
      stream_ = dnnl::stream(engine());
      double t0 = now_seconds();
      dnnl::matmul::desc d = bias_md ? dnnl::matmul::desc(a_md, b_any_md, *bias_md, c_md)
                                     : dnnl::matmul::desc(a_md, b_any_md, c_md);
      dnnl::matmul::primitive_desc pd(d, attr, engine());
      prim_ = dnnl::matmul(pd);
      create_us = (now_seconds() - t0) * 1e6;
      impl_ = pd.impl_info_str();
      dnnl::memory b_user(b_user_md, engine(), const_cast<void*>(b));
      b_mem_ = dnnl::memory(pd.weights_desc(), engine());
      dnnl::reorder(b_user, b_mem_).execute(stream_, b_user, b_mem_);
      stream_.wait();
      a_mem_ = dnnl::memory(a_md, engine(), const_cast<void*>(a));
      c_mem_ = dnnl::memory(c_md, engine(), c);
      args_ = {{DNNL_ARG_SRC, a_mem_}, {DNNL_ARG_WEIGHTS, b_mem_}, {DNNL_ARG_DST, c_mem_}};
      if (bias_md) {
        bias_mem_ = dnnl::memory(*bias_md, engine(), const_cast<void*>(bias));
        args_[DNNL_ARG_BIAS] = bias_mem_;
      }
      return true;
    } catch (const dnnl::error& e) {
      *err = std::string("oneDNN: ") + e.what();
      return false;
    }
  }

 private:
  dnnl::stream stream_;
  dnnl::matmul prim_;
  dnnl::memory a_mem_, b_mem_, c_mem_, bias_mem_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
};

}  // namespace

bool onednn_available() { return true; }

void onednn_set_threads(int n) {
  // Debian's oneDNN uses OpenMP (libgomp, loaded with libdnnl). Look the setter up at run time so
  // the bench needs no OpenMP flags of its own.
  using SetFn = void (*)(int);
  if (auto fn = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "omp_set_num_threads"))) fn(n);
}

std::unique_ptr<GemmPeer> make_onednn_int8(const PeerInt8Problem& p, std::string* err) {
  auto peer = std::make_unique<OneDnnMatmul>();
  dnnl::memory::desc a_md({p.m, p.k}, dt::u8, tag::ab);
  dnnl::memory::desc b_user({p.k, p.n}, dt::s8, tag::ab);
  dnnl::memory::desc b_any({p.k, p.n}, dt::s8, tag::any);
  dnnl::memory::desc bias_md({1, p.n}, dt::f32, tag::ab);
  dnnl::memory::desc c_md({p.m, p.n}, dt::u8, tag::ab);
  dnnl::primitive_attr attr;
  try {
    attr.set_output_scales(1 << 1, std::vector<float>(p.out_scale, p.out_scale + p.n));
    if (p.a_zp) attr.set_zero_points(DNNL_ARG_SRC, 0, {p.a_zp});
    if (p.c_zp) attr.set_zero_points(DNNL_ARG_DST, 0, {p.c_zp});
  } catch (const dnnl::error& e) {
    *err = std::string("oneDNN attributes: ") + e.what();
    return nullptr;
  }
  if (!peer->init(a_md, b_user, b_any, p.bias_acc ? &bias_md : nullptr, c_md, attr, p.a, p.b,
                  p.bias_acc, p.c, err))
    return nullptr;
  return peer;
}

std::unique_ptr<GemmPeer> make_onednn_f32(const PeerF32Problem& p, std::string* err) {
  auto peer = std::make_unique<OneDnnMatmul>();
  dnnl::memory::desc a_md({p.m, p.k}, dt::f32, tag::ab);
  dnnl::memory::desc b_user({p.k, p.n}, dt::f32, tag::ab);
  dnnl::memory::desc b_any({p.k, p.n}, dt::f32, tag::any);
  dnnl::memory::desc bias_md({1, p.n}, dt::f32, tag::ab);
  dnnl::memory::desc c_md({p.m, p.n}, dt::f32, tag::ab);
  dnnl::primitive_attr attr;
  if (!peer->init(a_md, b_user, b_any, p.bias ? &bias_md : nullptr, c_md, attr, p.a, p.b, p.bias,
                  p.c, err))
    return nullptr;
  return peer;
}

#else  // !QJ_HAVE_ONEDNN

bool onednn_available() { return false; }
void onednn_set_threads(int) {}
std::unique_ptr<GemmPeer> make_onednn_int8(const PeerInt8Problem&, std::string* err) {
  *err = "this quantjit-bench was built without oneDNN (install libdnnl-dev and re-run cmake)";
  return nullptr;
}
std::unique_ptr<GemmPeer> make_onednn_f32(const PeerF32Problem&, std::string* err) {
  *err = "this quantjit-bench was built without oneDNN (install libdnnl-dev and re-run cmake)";
  return nullptr;
}

#endif

}  // namespace bench
