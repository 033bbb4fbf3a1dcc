#include "siamese/config/load.h"

#include <gtest/gtest.h>

#include "siamese/common/error.h"
#include "support/scoped_env.h"

namespace siamese {
namespace {

using testing::ConfigTest;
using testing::error_of;
using testing::ScopedEnv;

// A small valid config; tests append or substitute lines.
const std::string kBase = R"(run_name: unit
model:
  d_model: 64
  n_heads: 4
  n_layers: 2
  max_sequence_length: 32
  vocab_size: 256
  embedding_size: 256
  eos_token_id: 0
  pad_token_id: 1
global_train_batch_size: 8
device_train_microbatch_size: 4
max_duration: 100
)";

void expect_contains(const std::string& text, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    EXPECT_NE(text.find(p), std::string::npos) << "missing \"" << p << "\" in:\n" << text;
}

using LoadConfig = ConfigTest;

TEST_F(LoadConfig, ReadsOlmoKeysAndKeepsDefaultsForTheRest) {
  const auto path = write("a.yaml", kBase +
                                        "optimizer:\n  learning_rate: 4.0e-4\n  betas:\n  - 0.9\n  - 0.99\n"
                                        "max_grad_norm: null\nload_path: null\n");
  const config::TrainConfig c = config::load_config(path, {});
  EXPECT_EQ(c.run_name, "unit");
  EXPECT_EQ(c.model.d_model, 64);
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 4e-4);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.9, 0.99}));
  EXPECT_TRUE(c.model.sliding_window_pattern.empty());
  EXPECT_FALSE(c.max_grad_norm.has_value());
  EXPECT_EQ(c.load_path, "");
  // OLMo's defaults where the file is silent.
  EXPECT_EQ(c.seed, 6198);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_EQ(c.scheduler.name, config::SchedulerName::CosineWithWarmup);
  EXPECT_EQ(c.model.residual, "pre");
}

TEST_F(LoadConfig, UnknownKeyNamesFileLinePathAndClosestKey) {
  const auto inside = write("typo2.yaml", "run_name: x\nmodel:\n  n_heads: 4\n  d_modle: 64\n");
  const std::string msg = error_of([&] { config::load_config(inside, {}); });
  expect_contains(msg, {"typo2.yaml:4", "unknown key model.d_modle", "did you mean model.d_model?"});

  const auto top = write("top.yaml", "run_name: x\nd_model: 64\n");
  expect_contains(error_of([&] { config::load_config(top, {}); }),
                  {"top.yaml:2", "unknown key d_model", "did you mean model.d_model?"});

  const auto section = write("section.yaml", "run_name: x\noptimiser:\n  learning_rate: 1e-3\n");
  expect_contains(error_of([&] { config::load_config(section, {}); }),
                  {"section.yaml:2", "unknown key optimiser", "did you mean optimizer?"});

  const auto nonsense = write("nonsense.yaml", "zzzzzzzzzzzzzzzzzz: 1\n");
  expect_contains(error_of([&] { config::load_config(nonsense, {}); }),
                  {"unknown key zzzzzzzzzzzzzzzzzz", "--schema"});
}

// An ignored OLMo key is accepted only with the values that leave OLMo's training as this
// trainer's; any other value is refused at its line, or on the command line, with the fix.
TEST_F(LoadConfig, IgnoredKeysThatWouldChangeTrainingAreRefusedUnlessOff) {
  const auto off =
      write("off.yaml",
            "run_name: x\nmax_grad_norm_ratio: null\nstop_at: ~\nmodel:\n  alibi: false\n"
            "optimizer:\n  selective_updates: false\ndata:\n  label_mask_paths: []\n  datasets: {}\n");
  EXPECT_NO_THROW(config::load_config(off, {}));
  const std::pair<std::string, std::string> refused[] = {
      {"max_grad_norm_ratio: 0.5\n", "max_grad_norm_ratio is 0.5"},
      {"stop_after: 100\n", "stop_after is 100"},
      {"model:\n  alibi: true\n", "model.alibi is true"},
      {"data:\n  label_mask_paths: [a.npy]\n", "data.label_mask_paths is a list"},
      {"data:\n  datasets: {wiki: [a.npy]}\n", "data.datasets is a mapping"},
  };
  for (const auto& [yaml, what] : refused) {
    const auto path = write("on.yaml", "run_name: x\n" + yaml);
    expect_contains(error_of([&] { config::load_config(path, {}); }),
                    {"on.yaml:", what, "remove the key or set it to"});
  }
  expect_contains(error_of([&] { config::load_config(off, {"--stop_at=10"}); }),
                  {"command line (--stop_at=10)", "stop_at is 10", "--stop-at"});
  EXPECT_NO_THROW(config::load_config(off, {"--model.alibi=false", "--stop_at=null"}));
}

TEST_F(LoadConfig, DuplicateKeyIsAnError) {
  const auto path = write("dup.yaml", "seed: 1\nseed: 2\n");
  expect_contains(error_of([&] { config::load_config(path, {}); }), {"dup.yaml:2", "duplicate key seed"});
}

TEST_F(LoadConfig, WrongTypeNamesExpectedAndGiven) {
  const auto path = write("type.yaml", "run_name: x\nmodel:\n  d_model: abc\n");
  expect_contains(
      error_of([&] { config::load_config(path, {}); }),
      {"type.yaml:3", "(model.d_model)", "expected an integer, got \"abc\"", "model.d_model: 768"});
  const auto dbl = write("dbl.yaml", "optimizer:\n  learning_rate: fast\n");
  expect_contains(error_of([&] { config::load_config(dbl, {}); }),
                  {"dbl.yaml:2", "optimizer.learning_rate", "expected a number, got \"fast\""});
  const auto boolean = write("bool.yaml", "model:\n  rope: maybe\n");
  expect_contains(error_of([&] { config::load_config(boolean, {}); }),
                  {"bool.yaml:2", "model.rope", "expected true or false, got \"maybe\""});
  const auto list = write("list.yaml", "optimizer:\n  betas: 0.9\n");
  expect_contains(error_of([&] { config::load_config(list, {}); }),
                  {"list.yaml:2", "optimizer.betas", "expected a list of numbers, got \"0.9\""});
  const auto map = write("map.yaml", "seed:\n  a: 1\n");
  expect_contains(error_of([&] { config::load_config(map, {}); }),
                  {"map.yaml:2", "(seed)", "expected an integer, got a mapping"});
  const auto section = write("sect.yaml", "model: 5\n");
  expect_contains(error_of([&] { config::load_config(section, {}); }),
                  {"sect.yaml:1", "expected a mapping of model.* keys"});
  const auto item = write("item.yaml", "optimizer:\n  betas: [0.9, x]\n");
  expect_contains(error_of([&] { config::load_config(item, {}); }),
                  {"optimizer.betas[1]", "expected a number, got \"x\""});
  const auto ints = write("ints.yaml", "model:\n  sliding_window_pattern: 4096\n");
  expect_contains(
      error_of([&] { config::load_config(ints, {}); }),
      {"ints.yaml:2", "model.sliding_window_pattern", "expected a list of integers, got \"4096\""});
  // A nested list item is named as the item it is, with the flat list as the fix.
  const auto nested = write("nested.yaml", "model:\n  sliding_window_pattern: [[4, 4], -1]\n");
  expect_contains(error_of([&] { config::load_config(nested, {}); }),
                  {"nested.yaml:2", "(model.sliding_window_pattern[0])",
                   "expected an integer (the items of a list of integers), got a list", "one flat list"});
  const auto null_int = write("null.yaml", "seed: null\n");
  expect_contains(error_of([&] { config::load_config(null_int, {}); }),
                  {"null.yaml:1", "(seed)", "expected an integer, got null"});
}

// A file with no keys is named as such (it used to read as every default, or fail with the
// errno of an unrelated call), and so is a file that is not a mapping.
TEST_F(LoadConfig, EmptyAndNonMappingFilesAreNamed) {
  for (const char* text : {"", "\n\n", "# only a comment\n", "~\n"}) {
    const auto path = write("empty.yaml", text);
    expect_contains(error_of([&] { config::load_config(path, {}); }),
                    {"empty.yaml", "the config file is empty: it sets no keys", "configs/tiny/base.yaml"});
  }
  const auto list = write("list.yaml", "- run_name: x\n");
  expect_contains(error_of([&] { config::load_config(list, {}); }),
                  {"list.yaml", "a config must be a mapping"});
}

// Each level of this file aliases the one below nine times: 9^9 references to the first
// list, held in about 100 nodes. Loading visits each node once, so it takes what the text
// does (it walked every reference, about a minute of CPU, under an ignored section).
TEST_F(LoadConfig, AnAliasBombLoadsInWorkLinearInTheFile) {
  std::string text = std::string(kBase) + "compile:\n  l0: &l0 [x, x, x, x, x, x, x, x, x]\n";
  for (int level = 1; level < 10; ++level) {
    text += "  l" + std::to_string(level) + ": &l" + std::to_string(level) + " [";
    for (int i = 0; i < 9; ++i) text += (i ? ", *l" : "*l") + std::to_string(level - 1);
    text += "]\n";
  }
  text += "  merged:\n    <<: {a: *l9}\n";
  const config::TrainConfig c = config::load_config(write("bomb.yaml", text), {});
  EXPECT_EQ(c.run_name, "unit");
}

TEST_F(LoadConfig, InvalidYamlNamesTheLine) {
  const auto path = write("bad.yaml", "run_name: x\nmodel:\n  d_model: [1, 2\n");
  expect_contains(error_of([&] { config::load_config(path, {}); }), {"bad.yaml:", "invalid YAML"});
  expect_contains(error_of([&] { config::load_config((dir_ / "missing.yaml").string(), {}); }),
                  {"missing.yaml", "config file not found"});
}

struct Combination {
  std::string extra;  // overrides that break one rule
  std::vector<std::string> expected;
};

TEST_F(LoadConfig, ImpossibleCombinationsAreRejectedWithTheKeyAndFix) {
  const auto path = write("combo.yaml", kBase);
  const std::vector<Combination> cases = {
      {"--model.n_heads=5", {"model.d_model 64 is not divisible by model.n_heads 5", "(model.n_heads)"}},
      {"--model.n_kv_heads=3",
       {"model.n_heads 4 is not divisible by model.n_kv_heads 3", "(model.n_kv_heads)"}},
      {"--model.n_kv_heads=0", {"model.n_kv_heads must be positive"}},
      {"--model.embedding_size=200",
       {"model.embedding_size 200 is smaller than model.vocab_size 256", "e.g. 256"}},
      {"--precision=bf16", {"precision \"bf16\" is not one of: fp32, amp_bf16, amp_fp16"}},
      {"--max_duration=10 steps", {"max_duration \"10 steps\" is not a duration", "(max_duration)", "1ep"}},
      {"--scheduler.name=cosine", {"scheduler.name \"cosine\" is not one of", "cosine_with_warmup"}},
      {"--scheduler.units=epochs", {"scheduler.units \"epochs\" is not one of: steps, tokens"}},
      {"--scheduler.name=inverted_sqrt_with_warmup", {"is not one of", "inverse_sqrt_with_warmup"}},
      {"--data.memmap_dtype=int16",
       {"data.memmap_dtype \"int16\" is not one of: uint8, uint16, uint32, uint64"}},
      {"--model.eos_token_id=300", {"model.eos_token_id 300 is outside the embedding table [0, 256)"}},
      {"--optimizer.betas=[0.9]", {"optimizer.betas needs two values"}},
      {"--model.sliding_window_pattern=[4, 0, -1]",
       {"model.sliding_window_pattern[1] is 0", "(model.sliding_window_pattern)", "-1 for full attention"}},
      {"--model.sliding_window_pattern=[4, 2.5]",
       {"(model.sliding_window_pattern[1])", "expected an integer, got \"2.5\"", "[4096, 4096, 4096, -1]"}},
      {"--model.activation_type=tanh", {"model.activation_type \"tanh\" is not one of: swiglu, gelu, relu"}},
      {"--model.attention_dropout=1.5", {"model.attention_dropout must be in [0, 1)"}},
      {"--optimizer.name=sgd", {"optimizer.name \"sgd\" is not one of: adamw"}},
      {"--model.mixln_alpha=2", {"model.mixln_alpha must be in [0, 1]"}},
      {"--model.hc_rate=100000", {"model.hc_rate must be in [1, 32]", "2 to 8 streams"}},
      {"--device=tpu", {"device \"tpu\" is not one of: auto, cpu, cuda"}},
      {"--device_train_microbatch_size=3",
       {"global_train_batch_size 8 / world size 1 = 8 sequences, which "
        "device_train_microbatch_size 3 does not divide"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.extra);
    const std::string msg = error_of([&] { config::load_config(path, {c.extra}); });
    expect_contains(msg, c.expected);
    expect_contains(msg, {"fix:"});
  }
}

TEST(Validate, DefaultsAreValidAndErrorsNameTheKeyWithoutAFile) {
  EXPECT_NO_THROW(validate(config::TrainConfig{}));
  config::TrainConfig c;
  c.model.n_kv_heads = 5;
  expect_contains(error_of([&] { validate(c); }),
                  {"(model.n_kv_heads): model.n_heads 12 is not divisible by model.n_kv_heads 5"});
}

// Initialising on the GPU would draw from another generator than the seed's CPU stream.
TEST_F(LoadConfig, InitDeviceCudaIsRefusedWithTheReasonAndMetaAccepted) {
  const auto path = write("init.yaml", kBase);
  expect_contains(error_of([&] { config::load_config(path, {"--model.init_device=cuda"}); }),
                  {"(model.init_device)", "model.init_device \"cuda\" is not one of: cpu, meta",
                   "same weights on any device", "set model.init_device: cpu or meta"});
  EXPECT_EQ(config::load_config(path, {"--model.init_device=meta"}).model.init_device,
            config::InitDevice::Meta);
}

TEST(Validate, Fp16LossScaleSettingsAreChecked) {
  config::TrainConfig c;
  c.fp16_initial_loss_scale = 0.5;
  expect_contains(error_of([&] { validate(c); }),
                  {"(fp16_initial_loss_scale)", "must be a power of two in [1, 2^100], got 0.5"});
  c.fp16_initial_loss_scale = 1000;
  expect_contains(error_of([&] { validate(c); }), {"power of two", "got 1000"});
  c = config::TrainConfig{};
  c.fp16_loss_scale_growth_interval = 0;
  expect_contains(error_of([&] { validate(c); }), {"(fp16_loss_scale_growth_interval)"});
}

TEST_F(LoadConfig, CombinationErrorPointsAtTheLineInTheFile) {
  const auto path = write("heads.yaml", "model:\n  d_model: 64\n  n_heads: 6\n");
  expect_contains(error_of([&] { config::load_config(path, {}); }),
                  {"heads.yaml:3 (model.n_heads)", "not divisible by model.n_heads 6"});
}

TEST_F(LoadConfig, WorldSizeSplitsTheGlobalBatch) {
  const auto path = write("ws.yaml", kBase);  // global 8, microbatch 4
  const config::TrainConfig c = config::load_config(path, {});
  EXPECT_NO_THROW(config::validate_for_world_size(c, 1));
  EXPECT_NO_THROW(config::validate_for_world_size(c, 2));
  EXPECT_NO_THROW(config::validate_for_world_size(c, 4));  // the microbatch is capped at 2 per rank
  EXPECT_NO_THROW(config::validate_for_world_size(c, 8));
  config::TrainConfig three = c;
  three.device_train_microbatch_size = 3;
  expect_contains(error_of([&] { config::validate_for_world_size(three, 2); }),
                  {"each rank gets global_train_batch_size 8 / world size 2 = 4 sequences, which "
                   "device_train_microbatch_size 3 does not divide",
                   "(device_train_microbatch_size)"});
  expect_contains(error_of([&] { config::validate_for_world_size(c, 3); }),
                  {"global_train_batch_size 8 does not split over world size 3"});
  config::LaunchSettings three_ranks;
  three_ranks.world_size = 3;
  expect_contains(error_of([&] { config::load_config(path, {}, three_ranks); }), {"ws.yaml", "world size 3"});
  {
    ScopedEnv ws("WORLD_SIZE", "two");
    expect_contains(error_of([&] { config::launch_settings_from_env(); }),
                    {"WORLD_SIZE=\"two\" is not a positive integer"});
  }
  ScopedEnv ws("WORLD_SIZE", "2");
  ScopedEnv model_type("MODEL_TYPE", "peri");
  const config::LaunchSettings launch = config::launch_settings_from_env();
  EXPECT_EQ(launch.world_size, 2);
  EXPECT_EQ(launch.model_type, "peri");
  EXPECT_EQ(config::load_config(path, {}, launch).global_train_batch_size, 8);
  // Without LaunchSettings the environment is not read (a checkpoint's saved config).
  EXPECT_EQ(config::load_config(path, {}).model.residual, "pre");
}

TEST_F(LoadConfig, InterpolatesKeysDottedKeysAndEnvironment) {
  ScopedEnv scratch("SIAMESE_TEST_SCRATCH", "/scratch");
  ScopedEnv unset("SIAMESE_TEST_UNSET", std::nullopt);
  const auto path = write("interp.yaml",
                          kBase +
                              "save_interval: 500\n"
                              "eval_interval: ${save_interval}\n"
                              "device_eval_batch_size: ${device_train_microbatch_size}\n"
                              "save_folder: ${oc.env:SIAMESE_TEST_SCRATCH,/x}/${run_name}-d${model.d_model}\n"
                              "load_path: ${oc.env:SIAMESE_TEST_UNSET,${save_folder}/latest}\n"
                              "data:\n  paths:\n  - ${oc.env:SIAMESE_TEST_UNSET,/data}/a.npy\n");
  const config::TrainConfig c = config::load_config(path, {});
  EXPECT_EQ(c.eval_interval, 500);
  EXPECT_EQ(c.device_eval_batch_size, 4);
  EXPECT_EQ(c.save_folder, "/scratch/unit-d64");
  EXPECT_EQ(c.load_path, "/scratch/unit-d64/latest");
  EXPECT_EQ(c.data.paths, std::vector<std::string>{"/data/a.npy"});
  // A referenced key the file does not set resolves to its default; overrides are seen too.
  const auto dflt = write("dflt.yaml", "run_name: r${seed}\n");
  EXPECT_EQ(config::load_config(dflt, {}).run_name, "r6198");
  EXPECT_EQ(config::load_config(dflt, {"--seed=7"}).run_name, "r7");
}

TEST_F(LoadConfig, InterpolationErrorsNameTheKey) {
  const auto missing_env = write("env.yaml", "run_name: ${oc.env:SIAMESE_TEST_UNSET}\n");
  ScopedEnv unset("SIAMESE_TEST_UNSET", std::nullopt);
  expect_contains(error_of([&] { config::load_config(missing_env, {}); }),
                  {"env.yaml:1 (run_name)", "SIAMESE_TEST_UNSET is not set"});
  const auto cycle = write("cycle.yaml", "run_name: ${save_folder}\nsave_folder: ${run_name}\n");
  expect_contains(error_of([&] { config::load_config(cycle, {}); }), {"cycle of interpolations"});
  const auto typo = write("ref.yaml", "run_name: ${model.d_modle}\n");
  expect_contains(
      error_of([&] { config::load_config(typo, {}); }),
      {"ref.yaml:1 (run_name)", "${model.d_modle} refers to no key", "did you mean model.d_model?"});
  const auto type = write("type.yaml", "model:\n  d_model: ${run_name}\nrun_name: abc\n");
  expect_contains(error_of([&] { config::load_config(type, {}); }),
                  {"type.yaml:2 (model.d_model)", "expected an integer, got \"abc\""});
}

// OLMo's ${path.glob:...}: a list key's value (or item) becomes the sorted files it matches;
// a pattern matching nothing, or a glob in a one-text key, is refused by name.
TEST_F(LoadConfig, PathGlobExpandsListKeysAndIsRefusedElsewhere) {
  const std::string dir = (dir_ / "shards").string();
  std::filesystem::create_directories(dir);
  for (const char* name : {"b.npy", "a.npy", "c.txt"}) write(std::string("shards/") + name, "x");
  const auto whole = write("glob.yaml", kBase + "data:\n  paths: ${path.glob:" + dir + "/*.npy}\n");
  EXPECT_EQ(config::load_config(whole, {}).data.paths,
            (std::vector<std::string>{dir + "/a.npy", dir + "/b.npy"}));
  const auto items =
      write("items.yaml", kBase + "data:\n  paths:\n  - " + dir + "/c.txt\n  - ${path.glob:" + dir +
                              "/b*,${path.choose:/nonexistent," + dir + "}/a*}\n");
  EXPECT_EQ(config::load_config(items, {}).data.paths,
            (std::vector<std::string>{dir + "/c.txt", dir + "/b.npy", dir + "/a.npy"}));
  const auto none = write("none.yaml", kBase + "data:\n  paths: ${path.glob:" + dir + "/*.bin}\n");
  expect_contains(error_of([&] { config::load_config(none, {}); }),
                  {"none.yaml:", "(data.paths)", "/*.bin} matches no file"});
  const auto scalar = write("scalar.yaml", kBase + "save_folder: ${path.glob:" + dir + "/*}\n");
  expect_contains(error_of([&] { config::load_config(scalar, {}); }),
                  {"scalar.yaml:", "(save_folder)", "gives a list of files", "whole value of a list key"});
}

TEST_F(LoadConfig, OverridePrecedenceOverModelTypeOverYaml) {
  const auto path = write("prec.yaml", kBase + "optimizer:\n  learning_rate: 4.0e-4\n");
  const auto res2 = write("res2.yaml", "model:\n  residual: post\n");
  config::ConfigOrigin origin;
  EXPECT_EQ(config::load_config(res2, {}, {}, &origin).model.residual, "post");
  EXPECT_EQ(origin.topology, res2 + ":2");
  EXPECT_EQ(config::load_config(path, {}, {}, &origin).model.residual, "pre");
  EXPECT_EQ(origin.topology, "default");
  config::LaunchSettings model_type;
  model_type.model_type = "hybrid_pre";
  EXPECT_EQ(config::load_config(res2, {}, model_type, &origin).model.residual, "hybrid_pre");
  EXPECT_EQ(origin.topology, "MODEL_TYPE");
  EXPECT_EQ(config::load_config(res2, {"--model.residual=peri"}, model_type, &origin).model.residual, "peri");
  EXPECT_EQ(origin.topology, "--model.residual");
  const config::TrainConfig c = config::load_config(
      path, {"--optimizer.learning_rate=2e-3", "--model.d_model", "128", "model.n_layers=3",
             "--optimizer.betas=[0.8,0.9]", "--model.sliding_window_pattern=[8, 8, -1]"});
  EXPECT_DOUBLE_EQ(c.optimizer.learning_rate, 2e-3);
  EXPECT_EQ(c.model.d_model, 128);
  EXPECT_EQ(c.model.n_layers, 3);
  EXPECT_EQ(c.optimizer.betas, (std::vector<double>{0.8, 0.9}));
  EXPECT_EQ(c.model.sliding_window_pattern, (std::vector<int64_t>{8, 8, -1}));
  EXPECT_EQ(config::load_config(path, {"--max_grad_norm=null"}).max_grad_norm, std::nullopt);
}

TEST_F(LoadConfig, BadOverridesNameTheCommandLine) {
  const auto path = write("o.yaml", kBase);
  expect_contains(
      error_of([&] { config::load_config(path, {"--model.d_modl=256"}); }),
      {"command line (--model.d_modl=256)", "unknown key model.d_modl", "did you mean model.d_model?"});
  expect_contains(error_of([&] { config::load_config(path, {"--model.d_model=abc"}); }),
                  {"command line (--model.d_model=abc) (model.d_model)", "expected an integer, got \"abc\""});
  expect_contains(error_of([&] { config::load_config(path, {"--seed"}); }),
                  {"override \"--seed\" has no value"});
  expect_contains(error_of([&] { config::load_config(path, {"stray"}); }),
                  {"override \"stray\" has no value"});
  expect_contains(error_of([&] { config::load_config(path, {"--model.n_heads=3"}); }),
                  {"command line (--model.n_heads=3) (model.n_heads)", "not divisible"});
}

TEST_F(LoadConfig, OlmoKeysWeDoNotUseAreAcceptedNotErrors) {
  const auto path =
      write("olmo.yaml", kBase +
                             "wandb:\n  name: ${run_name}\n  project: p\n"
                             "compile: null\nfsdp:\n  precision: mixed\ndry_run: false\n"
                             "speed_monitor:\n  window_size: 20\nsave_interval_unsharded: 10000\n"
                             "data:\n  prefetch_factor: 16\n  persistent_workers: true\n"
                             "evaluators:\n  - label: v\n    data:\n      num_workers: 0\n"
                             "      datasets:\n        a:\n");
  const config::TrainConfig c = config::load_config(path, {"--fsdp.precision=pure"});
  ASSERT_EQ(c.evaluators.size(), 1u);
  EXPECT_EQ(c.evaluators[0].label, "v");
}

TEST_F(LoadConfig, EvaluatorsAreAListOfMapsWithTheirOwnKeys) {
  const auto path =
      write("ev.yaml",
            kBase +
                "evaluators:\n"
                "  - label: ppl\n    type: lm\n    data:\n      paths: [v.npy]\n      memmap_dtype: uint32\n"
                "  - label: piqa\n    type: downstream\n");
  const config::TrainConfig c = config::load_config(path, {});
  ASSERT_EQ(c.evaluators.size(), 2u);
  EXPECT_EQ(c.evaluators[0].paths, std::vector<std::string>{"v.npy"});
  EXPECT_EQ(c.evaluators[0].memmap_dtype, config::TokenDtype::Uint32);
  EXPECT_EQ(c.evaluators[1].type, config::EvaluatorType::Downstream);
  EXPECT_FALSE(c.evaluators[1].memmap_dtype.has_value());
  EXPECT_EQ(c.evaluators[1].subset_num_batches, -1);

  const auto typo = write("evtypo.yaml", "evaluators:\n  - label: a\n    paths: [v.npy]\n");
  expect_contains(
      error_of([&] { config::load_config(typo, {}); }),
      {"evtypo.yaml:3", "unknown key evaluators[0].paths", "did you mean evaluators[0].data.paths?"});
  const auto type = write("evtype.yaml", "evaluators:\n  - label: a\n  - label: b\n    type: ppl\n");
  expect_contains(error_of([&] { config::load_config(type, {}); }),
                  {"evtype.yaml:4 (evaluators[1].type)", "\"ppl\" is not one of: lm, downstream"});
  const auto dup = write("evdup.yaml", "evaluators:\n  - label: a\n  - label: a\n");
  expect_contains(error_of([&] { config::load_config(dup, {}); }),
                  {"evdup.yaml:3", "two evaluators are labelled \"a\""});
  const auto not_list = write("evmap.yaml", "evaluators:\n  label: a\n");
  expect_contains(error_of([&] { config::load_config(not_list, {}); }),
                  {"expected a list of evaluator maps, got a mapping"});
}

// data.source_mixture: OLMo-core's fields per source, its checks, and what the run needs.
TEST_F(LoadConfig, AMixtureIsAListOfSourcesCheckedAsOlmoCoreChecksThem) {
  const std::string mixture =
      "data:\n  source_mixture:\n"
      "    - source_name: web\n      target_ratio: 0.7\n      paths: [w.npy]\n"
      "    - source_name: code\n      target_ratio: 0.3\n      paths: [c.npy]\n      max_repetition_ratio: "
      "2\n";
  const auto path = write("mix.yaml", kBase + mixture);
  const config::TrainConfig c = config::load_config(path, {});
  ASSERT_EQ(c.data.source_mixture.size(), 2u);
  EXPECT_EQ(c.data.source_mixture[1].source_name, "code");
  EXPECT_EQ(c.data.source_mixture[1].max_repetition_ratio, 2.0);
  EXPECT_EQ(c.data.source_mixture[0].max_source_fraction, 1.0);
  const std::vector<Combination> cases = {
      {"--data.source_mixture=[{source_name: a, target_ratio: 0.7, paths: [a.npy]}, "
       "{source_name: b, target_ratio: 0.2, paths: [b.npy]}]",
       {"the target_ratio of the sources sum to 0.9", "(data.source_mixture)", "add up to 1"}},
      {"--data.source_mixture=[{source_name: a, target_ratio: 1.5, paths: [a.npy]}]",
       {"data.source_mixture[0].target_ratio must be in (0, 1]"}},
      {"--data.source_mixture=[{source_name: a, target_ratio: 1, paths: [a.npy], max_repetition_ratio: 0.5}]",
       {"data.source_mixture[0].max_repetition_ratio must be >= 1"}},
      {"--data.source_mixture=[{source_name: a, target_ratio: 0.5, paths: [a.npy]}, "
       "{source_name: a, target_ratio: 0.5, paths: [b.npy]}]",
       {"two sources are named a"}},
      {"--data.source_mixture=[{source_name: a, target_ratio: 1, paths: []}]",
       {"data.source_mixture[0].paths is empty"}},
      {"--data.paths=[x.npy]", {"data.paths and data.source_mixture are both set"}},
      {"--max_duration=2ep", {"max_duration 2ep is in epochs", "steps or tokens"}},
      {"--data.source_mixture=[{source: a}]", {"unknown key data.source_mixture[0].source"}},
  };
  for (const auto& k : cases) {
    SCOPED_TRACE(k.extra);
    const std::string msg = error_of([&] { config::load_config(path, {k.extra}); });
    expect_contains(msg, k.expected);
  }
}

}  // namespace
}  // namespace siamese
