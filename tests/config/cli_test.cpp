// `siamese config` end to end: the real binary, real files, exit codes and streams.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <fstream>
#include <sstream>

#include "siamese/config/schema.h"
#include "support/process.h"
#include "support/scoped_env.h"

namespace siamese {
namespace {

using testing::ConfigTest;
using testing::Outcome;
using testing::read_all;
using testing::run_siamese;

class ConfigCommand : public ConfigTest {
 protected:
  // Runs `env ENV siamese config ARGS` from the repository root.
  Outcome run(const std::string& args, const std::string& env = "") const {
    return run_siamese("config " + args, dir_, "-u MODEL_TYPE -u WORLD_SIZE " + env);
  }
};

TEST_F(ConfigCommand, PrintsResolvedYamlThatReadsBackIdentically) {
  const Outcome first = run("configs/tiny/base.yaml --optimizer.learning_rate=2e-3 --model.n_layers 4");
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.output.find("learning_rate: 0.002"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("n_layers: 4"), std::string::npos) << first.output;
  EXPECT_EQ(first.output.find("${"), std::string::npos) << "unresolved interpolation:\n" << first.output;
  EXPECT_NE(first.err.find("topology: pre (from configs/tiny/base.yaml:"), std::string::npos) << first.err;
  const std::string resolved = write("resolved.yaml", first.output);
  const Outcome second = run(resolved);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  EXPECT_EQ(second.output, first.output);
}

TEST_F(ConfigCommand, ModelTypeSelectsTheTopologyAndAnOverrideBeatsIt) {
  const Outcome env = run("configs/tiny/hybrid.yaml", "MODEL_TYPE=hybrid");
  ASSERT_EQ(env.exit_code, 0) << env.err;
  EXPECT_NE(env.err.find("topology: hybrid (from MODEL_TYPE)"), std::string::npos) << env.err;
  EXPECT_NE(env.output.find("residual: \"hybrid\""), std::string::npos) << env.output;
  const Outcome over = run("configs/tiny/base.yaml --model.residual=post_pre", "MODEL_TYPE=peri");
  ASSERT_EQ(over.exit_code, 0) << over.err;
  EXPECT_NE(over.err.find("topology: post_pre (from --model.residual)"), std::string::npos) << over.err;
  const Outcome yaml = run("configs/tiny/hybrid.yaml");
  EXPECT_NE(yaml.err.find("topology: hybrid_pre (from configs/tiny/hybrid.yaml:"), std::string::npos)
      << yaml.err;
}

TEST_F(ConfigCommand, ModelTypeAloneTurnsOnWhatTheTopologyNeedsAndAContradictionIsAnError) {
  // configs/tiny/base.yaml leaves the Q/K/V norms at their default (off).
  const Outcome base = run("configs/tiny/base.yaml");
  ASSERT_EQ(base.exit_code, 0) << base.err;
  EXPECT_NE(base.output.find("use_query_norm: false"), std::string::npos) << base.output;
  for (const char* topology : {"hybrid", "hybrid_star", "hybrid_pre"}) {
    const Outcome env = run("configs/tiny/base.yaml", std::string("MODEL_TYPE=") + topology);
    ASSERT_EQ(env.exit_code, 0) << topology << "\n" << env.err;
    for (const char* key : {"use_query_norm: true", "use_key_norm: true", "use_value_norm: true"})
      EXPECT_NE(env.output.find(key), std::string::npos) << topology << " " << key << "\n" << env.output;
  }
  const Outcome off = run("configs/tiny/base.yaml --model.use_key_norm=false", "MODEL_TYPE=hybrid_pre");
  EXPECT_EQ(off.exit_code, 2);
  EXPECT_EQ(off.output, "");
  EXPECT_NE(off.err.find("topology hybrid_pre (from MODEL_TYPE) is defined with model.use_key_norm on"),
            std::string::npos)
      << off.err;
  EXPECT_NE(off.err.find("command line (--model.use_key_norm=false) (model.use_key_norm)"), std::string::npos)
      << off.err;
  EXPECT_NE(off.err.find("fix: remove the setting"), std::string::npos) << off.err;
}

// A topology's own default (mhc: 4 streams) applies where the config leaves the key out; a
// value the user sets wins.
TEST_F(ConfigCommand, ModelTypeMhcGetsFourStreamsUnlessTheConfigSetsThem) {
  for (const char* topology : {"mhc", "mhc_lite"}) {
    const Outcome alone = run("configs/tiny/base.yaml", std::string("MODEL_TYPE=") + topology);
    ASSERT_EQ(alone.exit_code, 0) << alone.err;
    EXPECT_NE(alone.output.find("hc_rate: 4"), std::string::npos) << alone.output;
    const Outcome set =
        run("configs/tiny/base.yaml --model.hc_rate=3", std::string("MODEL_TYPE=") + topology);
    ASSERT_EQ(set.exit_code, 0) << set.err;
    EXPECT_NE(set.output.find("hc_rate: 3"), std::string::npos) << set.output;
  }
  const Outcome hc = run("configs/tiny/base.yaml", "MODEL_TYPE=hc");
  ASSERT_EQ(hc.exit_code, 0) << hc.err;
  EXPECT_NE(hc.output.find("hc_rate: 2"), std::string::npos) << hc.output;
}

TEST_F(ConfigCommand, UnknownTopologyListsTheValidNames) {
  const Outcome r = run("configs/tiny/base.yaml", "MODEL_TYPE=prenorm");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(r.output.empty()) << r.output;
  for (const char* part : {"environment MODEL_TYPE (model.residual)", "unknown topology \"prenorm\"", "pre,",
                           "hybrid_pre", "post_pre", "hc"})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " in " << r.err;
}

TEST_F(ConfigCommand, BadInputExitsNonZeroWritesNothingAndExplains) {
  const std::string save = (dir_ / "never_created").string();
  const Outcome typo = run("configs/tiny/base.yaml --save_folder=" + save + " --model.d_modl=512");
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_TRUE(typo.output.empty()) << typo.output;
  EXPECT_NE(typo.err.find("did you mean model.d_model?"), std::string::npos) << typo.err;
  const Outcome heads = run("configs/tiny/base.yaml --save_folder=" + save + " --model.n_heads=3");
  EXPECT_EQ(heads.exit_code, 2);
  EXPECT_NE(heads.err.find("not divisible by model.n_heads 3"), std::string::npos) << heads.err;
  const std::string bad = write("bad.yaml", "model:\n  d_model: abc\n");
  const Outcome type = run(bad);
  EXPECT_EQ(type.exit_code, 2);
  EXPECT_NE(type.err.find("bad.yaml:2 (model.d_model): expected an integer, got \"abc\""), std::string::npos)
      << type.err;
  EXPECT_FALSE(std::filesystem::exists(save));
  EXPECT_NE(run("").exit_code, 0);
  EXPECT_NE(run("configs/no_such.yaml").err.find("config file not found"), std::string::npos);
}

TEST_F(ConfigCommand, SchemaIsTheTableAndTheDocsContainIt) {
  const Outcome r = run("--schema");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.output.rfind(config::schema::markdown(), 0), 0u);  // the key tables, then the topology table
  EXPECT_NE(r.output.find("### Topologies"), std::string::npos);
  EXPECT_NE(r.output.find("| `hybrid_pre` | `x`, `y` | `model.use_query_norm`"), std::string::npos)
      << r.output;
  const std::string doc = read_all(std::string(SIAMESE_SOURCE_DIR) + "/docs/configuration.md");
  EXPECT_NE(doc.find(r.output), std::string::npos)
      << "docs/configuration.md is out of date: regenerate its reference with `siamese config --schema`";
}

// Option values outside what makes sense are refused before any work, with a message that
// names the option (CLI11's checks, and the commands' own before they load anything).
TEST_F(ConfigCommand, OptionValuesOutsideTheirRangeAreRefusedNamingTheOption) {
  const std::pair<std::string, std::string> cases[] = {
      {"eval runs/none --limit -5", "--limit"},
      {"eval runs/none --tasks ,", "--tasks"},
      {"bench configs/tiny/base.yaml --steps 0", "--steps"},
      {"bench configs/tiny/base.yaml --compare pre,pre:model.d_model", "--compare"},
      {"bench configs/tiny/base.yaml --compare pre:model.no_such_key=1", "model.no_such_key"},
      {"generate runs/none --prompt x --top-p 0", "--top-p"},
      {"generate runs/none --prompt x --temperature 1e-300", "--temperature"},
      {"detokenize --tokenizer t.json x.npy --offset -1", "--offset"},
      {"sweep configs/sweeps/quickstart_lr.yaml --jobs 0", "--jobs"},
      {"report runs/none --final-window 0", "--final-window"},
  };
  for (const auto& [args, option] : cases) {
    const Outcome r = run_siamese(args, dir_, "-u MODEL_TYPE -u WORLD_SIZE");
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_NE((r.output + r.err).find(option), std::string::npos) << args << "\n" << r.output << r.err;
    EXPECT_EQ((r.output + r.err).find("terminate called"), std::string::npos) << args;
  }
}

// `bench --compare` entries are whole configs: an entry's own overrides change only its model,
// on top of the command line's, and the ratios are to the first entry.
TEST_F(ConfigCommand, BenchCompareEntriesCarryTheirOwnOverrides) {
  const Outcome r = run_siamese(
      "bench configs/tiny/quickstart.yaml --model.n_layers=2 --model.max_sequence_length=16 "
      "--global_train_batch_size=2 --device_train_microbatch_size=2 --steps 1 --warmup 0 --rounds 1 "
      "--compare pre,pre:model.n_layers=1,pre:model.layer_norm_type=dyt",
      dir_, "-u MODEL_TYPE -u WORLD_SIZE");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto params_of = [&](const std::string& label) {
    const size_t line = r.output.find("\n" + label + " ");
    EXPECT_NE(line, std::string::npos) << label << "\n" << r.output;
    if (line == std::string::npos) return int64_t{-1};
    const size_t count_end = r.output.find(" params,", line);
    const size_t open = r.output.rfind('(', count_end) + 1;
    return int64_t{std::stoll(r.output.substr(open, count_end - open))};
  };
  const int64_t pre = params_of("pre"), one_layer = params_of("pre:model.n_layers=1"),
                dyt = params_of("pre:model.layer_norm_type=dyt");
  EXPECT_LT(one_layer, pre);
  EXPECT_GT(dyt, pre);  // DyT's alpha per norm
  EXPECT_NE(r.output.find("ratio pre:model.n_layers=1/pre: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ratio pre:model.layer_norm_type=dyt/pre: "), std::string::npos) << r.output;
}

// A model that cannot fit is refused from its config, before anything is allocated, naming
// the size keys and the bytes: not an allocator error, a stack trace or the kernel's kill.
TEST_F(ConfigCommand, AbsurdModelSizesAreRefusedBeforeAllocating) {
  for (const std::string size : {"--model.n_layers=1000000", "--model.d_model=1000000000 --model.n_heads=1",
                                 "--model.block_type=moe --model.moe_num_experts=2000000"}) {
    const Outcome r = run_siamese(
        "train configs/tiny/quickstart.yaml --save_folder=" + (dir_ / "run").string() + " " + size, dir_,
        "-u MODEL_TYPE -u WORLD_SIZE");
    EXPECT_EQ(r.exit_code, 2) << size << "\n" << r.err;
    EXPECT_NE(r.err.find("GiB for its weights, gradients and AdamW state"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("model.n_layers"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("c10::"), std::string::npos) << r.err;
    if (size.find("experts") != std::string::npos) {
      EXPECT_NE(r.err.find("model.moe_num_experts 2000000"), std::string::npos) << r.err;
    }
  }
}

}  // namespace
}  // namespace siamese
