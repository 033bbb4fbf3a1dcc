#pragma once
// The config keys that take one of a fixed list of values, as enums. The loader turns the
// text into the enum once (schema.cpp: the YAML spelling is the name at the enum's index);
// code past the loader compares enums, never text. The spellings are OLMo's, so OLMo YAML
// files and checkpoints read the same.
#include <array>
#include <cstddef>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace siamese::config {

// EnumNames<E>::names[i] is the YAML spelling of the enum value i.
template <class E>
struct EnumNames;

template <class E>
std::string name_of(E value) {
  return std::string(EnumNames<E>::names[static_cast<size_t>(value)]);
}

// The value spelled `text`, for settings given outside a config file (command-line flags).
template <class E>
std::optional<E> enum_named(std::string_view text) {
  const auto& names = EnumNames<E>::names;
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == text) return static_cast<E>(i);
  return std::nullopt;
}

template <class E>
std::vector<std::string> spellings() {
  return {EnumNames<E>::names.begin(), EnumNames<E>::names.end()};
}

// Streams (logs, test failures) show the spelling.
template <class E, class = decltype(EnumNames<E>::names)>
std::ostream& operator<<(std::ostream& out, E value) {
  return out << EnumNames<E>::names[static_cast<size_t>(value)];
}

// Each table names the enum's last value: a value added without its spelling (or a spelling
// without its value) fails to compile instead of reading past the table.
#define SIAMESE_ENUM_NAMES(E, LAST, ...)                                                        \
  template <>                                                                                   \
  struct EnumNames<E> {                                                                         \
    static constexpr std::array names = {__VA_ARGS__};                                          \
    static_assert(names.size() == static_cast<size_t>(E::LAST) + 1, #E ": one name per value"); \
  }

using Spelling = std::string_view;

enum class Precision { Fp32, AmpBf16, AmpFp16 };
SIAMESE_ENUM_NAMES(Precision, AmpFp16, Spelling("fp32"), Spelling("amp_bf16"), Spelling("amp_fp16"));
inline bool autocasts(Precision p) { return p != Precision::Fp32; }

// Which blocks recompute their activations in backward ("": none).
enum class ActivationCheckpointing { None, WholeLayer, OneInTwo, OneInThree, OneInFour };
SIAMESE_ENUM_NAMES(ActivationCheckpointing, OneInFour, Spelling(""), Spelling("whole_layer"),
                   Spelling("one_in_two"), Spelling("one_in_three"), Spelling("one_in_four"));

enum class DistributedStrategy { Ddp, Fsdp };
SIAMESE_ENUM_NAMES(DistributedStrategy, Fsdp, Spelling("ddp"), Spelling("fsdp"));

// ours: the c10d backend of the ranks' collectives. auto: NCCL for CUDA tensors, Gloo for CPU
// ones; gloo with CUDA tensors stages each collective through host memory, which lets several
// ranks share one GPU (NCCL refuses that).
enum class CommBackend { Auto, Nccl, Gloo };
SIAMESE_ENUM_NAMES(CommBackend, Gloo, Spelling("auto"), Spelling("nccl"), Spelling("gloo"));

enum class ShardingStrategy { NoShard, ShardGradOp, FullShard, HybridShard };
SIAMESE_ENUM_NAMES(ShardingStrategy, HybridShard, Spelling("NO_SHARD"), Spelling("SHARD_GRAD_OP"),
                   Spelling("FULL_SHARD"), Spelling("HYBRID_SHARD"));

// fsdp.precision: pure reduces in the autocast dtype, mixed in float32.
enum class FsdpPrecision { Pure, Mixed };
SIAMESE_ENUM_NAMES(FsdpPrecision, Mixed, Spelling("pure"), Spelling("mixed"));

enum class WrappingStrategy { None, ByBlock };
SIAMESE_ENUM_NAMES(WrappingStrategy, ByBlock, Spelling(""), Spelling("by_block"));

// model.siamese.x_stream: the single-stream topology whose norm placement SiameseNorm's X
// stream takes ("": post, or the placement post_pre and hybrid_pre fix).
enum class XStream { Unset, Post, Hybrid, HybridStar, DeepNorm, MixLN, Peri, LNS, Pre, Reordered };
SIAMESE_ENUM_NAMES(XStream, Reordered, Spelling(""), Spelling("post"), Spelling("hybrid"),
                   Spelling("hybrid_star"), Spelling("deepnorm"), Spelling("mixln"), Spelling("peri"),
                   Spelling("lns"), Spelling("pre"), Spelling("reordered"));

// Whether a custom kernel family runs its kernels or the ATen composition (model.kernels.*;
// "": as model.kernels.all).
enum class KernelChoice { Unset, Fused, Aten };
SIAMESE_ENUM_NAMES(KernelChoice, Aten, Spelling(""), Spelling("fused"), Spelling("aten"));

enum class Activation { SwiGLU, GELU, ReLU };
SIAMESE_ENUM_NAMES(Activation, ReLU, Spelling("swiglu"), Spelling("gelu"), Spelling("relu"));

enum class BlockType { Sequential, Moe };
SIAMESE_ENUM_NAMES(BlockType, Moe, Spelling("sequential"), Spelling("moe"));

// default and low_precision are both LayerNorm here (autocast decides its precision).
enum class LayerNormType { Default, LowPrecision, RMS, DyT, Derf };
SIAMESE_ENUM_NAMES(LayerNormType, Derf, Spelling("default"), Spelling("low_precision"), Spelling("rms"),
                   Spelling("dyt"), Spelling("derf"));

// OLMo's meta defers allocation; here both initialise on the CPU (validate.cpp says why).
enum class InitDevice { Cpu, Meta };
SIAMESE_ENUM_NAMES(InitDevice, Meta, Spelling("cpu"), Spelling("meta"));

enum class InitFn { Normal, Mitchell, FullMegatron };
SIAMESE_ENUM_NAMES(InitFn, FullMegatron, Spelling("normal"), Spelling("mitchell"), Spelling("full_megatron"));

// How init, learning rates and multipliers scale with width and depth (model/parametrization.h):
// as set (standard), μP (Yang et al. 2022, arXiv 2203.03466) or CompleteP (Dey et al. 2025,
// arXiv 2505.01618: μP plus residual branches scaled by depth^-alpha).
enum class Parametrization { Standard, Mup, CompleteP };
SIAMESE_ENUM_NAMES(Parametrization, CompleteP, Spelling("standard"), Spelling("mup"), Spelling("completep"));

// How the experts of an MoE block run (mlp.h).
enum class MoeImpl { Sparse, Grouped, Loop };
SIAMESE_ENUM_NAMES(MoeImpl, Loop, Spelling("sparse"), Spelling("grouped"), Spelling("loop"));

// Over what an MoE block's load-balancing loss counts its shares (OLMo-core's
// MoELoadBalancingLossGranularity): the micro-batch's tokens together, or each sequence.
enum class LbLossGranularity { LocalBatch, Instance };
SIAMESE_ENUM_NAMES(LbLossGranularity, Instance, Spelling("local_batch"), Spelling("instance"));

enum class OptimizerName { AdamW, Muon };
SIAMESE_ENUM_NAMES(OptimizerName, Muon, Spelling("adamw"), Spelling("muon"));

// Muon's step size for an A x B matrix (torch's adjust_lr_fn).
enum class MuonLrAdjust { Original, MatchRmsAdamW };
SIAMESE_ENUM_NAMES(MuonLrAdjust, MatchRmsAdamW, Spelling("original"), Spelling("match_rms_adamw"));

// OLMo's SchedulerType values this trainer implements (lr_schedule.cpp), and OLMo-core's
// warmup-stable-decay.
enum class SchedulerName {
  Constant,
  ConstantWithWarmup,
  CosineWithWarmup,
  LinearWithWarmup,
  InverseSqrtWithWarmup,
  Wsd
};
SIAMESE_ENUM_NAMES(SchedulerName, Wsd, Spelling("constant"), Spelling("constant_with_warmup"),
                   Spelling("cosine_with_warmup"), Spelling("linear_with_warmup"),
                   Spelling("inverse_sqrt_with_warmup"), Spelling("wsd"));

// The shape of WSD's decay from the peak to alpha_f of it: linear (OLMo-core's WSD), half a
// cosine, or 1 - sqrt (Hägele et al. 2024, arXiv 2405.18392, their best).
enum class DecayShape { Linear, Cosine, OneMinusSqrt };
SIAMESE_ENUM_NAMES(DecayShape, OneMinusSqrt, Spelling("linear"), Spelling("cosine"), Spelling("1-sqrt"));

enum class ScheduleUnits { Steps, Tokens };
SIAMESE_ENUM_NAMES(ScheduleUnits, Tokens, Spelling("steps"), Spelling("tokens"));

// The element type of a token file (numpy memmap).
enum class TokenDtype { Uint8, Uint16, Uint32, Uint64 };
SIAMESE_ENUM_NAMES(TokenDtype, Uint64, Spelling("uint8"), Spelling("uint16"), Spelling("uint32"),
                   Spelling("uint64"));
inline size_t token_bytes(TokenDtype t) { return size_t{1} << static_cast<size_t>(t); }

enum class Side { Right, Left };
SIAMESE_ENUM_NAMES(Side, Left, Spelling("right"), Spelling("left"));

// The built-in corpus used when data.paths is empty ("": none).
enum class SyntheticCorpus { None, Arithmetic };
SIAMESE_ENUM_NAMES(SyntheticCorpus, Arithmetic, Spelling(""), Spelling("arithmetic"));

enum class EvaluatorType { Lm, Downstream };
SIAMESE_ENUM_NAMES(EvaluatorType, Downstream, Spelling("lm"), Spelling("downstream"));

#undef SIAMESE_ENUM_NAMES

}  // namespace siamese::config
