// EngineWorker (see engine_worker.h): everything that touches the engine — loading, adapters,
// tokenizing, stepping runs A and B, replaying a reopened session — on the engine thread. Each
// result is emitted as a value copy; the GUI thread drops results of runs it no longer shows.
#include "app/engine_worker.h"
#include "app/inspector_context.h"

#include <QFile>
#include <chrono>
#include <exception>
#include <string>

#include "engine/backend/backend.h"
#include "engine/core/bandwidth.h"
#include "engine/core/error.h"
#include "engine/io/adapter.h"
#include "engine/model/loader.h"
#include "engine/model/quantize.h"
#include "engine/model/weights.h"
#include "engine/probes/hidden_attention.h"
#include "engine/tokenizer/chat_template.h"
#include "engine/tokenizer/tokenizer.h"
#include "sessions/identity.h"
#include "sessions/recorder.h"

namespace hl::app {

namespace {
std::string localPath(const QString& p) {
  return QFile::encodeName(p).toStdString();
}
QString qs(const char* s) {
  return QString::fromUtf8(s);
}
}  // namespace

Toggles togglesOf(const hl::RunSettings& s) {
  Toggles t;
  t.normalizerOverride = s.normalizer_override;
  t.normalizer = s.normalizer;
  t.registers = s.registers;
  t.adapter = !s.adapter.empty();
  return t;
}

EngineWorker::EngineWorker(std::shared_ptr<EngineFlags> flags, QObject* parent)
    : QObject(parent), flags_(std::move(flags)) {}

EngineWorker::~EngineWorker() = default;

bool EngineWorker::stopped(int epoch) const {
  return flags_->stopEpoch.load() != epoch;
}

std::string EngineWorker::tokenText(int32_t id) const {
  return tokenizer_ ? tokenizer_->piece(id) : std::string();
}

void EngineWorker::loadModel(int requestId, int cancelEpoch, const QString& dir, const QString& weights) {
  const std::string path = localPath(dir);
  try {
    const auto t0 = std::chrono::steady_clock::now();
    hl::LoadOptions opts;
    opts.progress.callback = [&](int64_t done, int64_t total, const std::string& what) {
      if (flags_->cancelEpoch.load() != cancelEpoch) return false;
      emit loadProgress(requestId, done, total, QString::fromStdString(what));
      return true;
    };
    if (!weights.isEmpty())
      opts.weights = hl::parse_weight_format(weights.toStdString(), "weights", &opts.quantize_head, &opts.fp32_activations);
    std::shared_ptr<hl::Model> m = hl::load_model(path, opts);
    std::unique_ptr<hl::Tokenizer> tok;
    if (!m->tokenizer_path.empty()) tok = hl::Tokenizer::load(m->tokenizer_path);
    ModelInfo info;
    info.requestId = requestId;
    info.identity = hl::identify_checkpoint(path);
    m->check_files();  // the identity read the files the weights came from
    if (flags_->cancelEpoch.load() != cancelEpoch) throw hl::Cancelled();
    info.dir = dir;
    info.name = QString::fromStdString(m->name);
    info.config = m->config;
    info.schedule = m->schedule;
    info.hasTokenizer = tok != nullptr;
    try {
      info.chatTemplate = hl::find_chat_template(path);
    } catch (const hl::Error& e) {
      info.chatTemplateError = QString::fromUtf8(e.what());
    }
    if (tok) info.chatTokenizer = hl::Tokenizer::load(m->tokenizer_path);
    if (tok) {
      info.vocab.resize(static_cast<size_t>(m->config.vocab_size));
      for (int64_t i = 0; i < m->config.vocab_size; ++i) info.vocab[i] = tok->piece(static_cast<int32_t>(i));
    }
    info.params = m->param_count();
    info.activeParams = m->active_param_count();
    info.weightBytesPerToken = m->weight_bytes_per_token();
    info.weights = QString::fromStdString(hl::weights_label(*m));
    if (const hl::WeightQuantization* q = m->quantization.get()) {
      info.quantSummary = tr("weights quantised on load to %1: %2 of %3 matrices, worst relative RMS error %4 %, %5 → %6 MiB")
                              .arg(info.weights)
                              .arg(q->quantized_count())
                              .arg(q->mats.size())
                              .arg(100.0 * q->worst_rel_rms(), 0, 'f', 2)
                              .arg(static_cast<double>(q->bytes_before) / 1048576.0, 0, 'f', 1)
                              .arg(static_cast<double>(q->bytes_after) / 1048576.0, 0, 'f', 1);
    }
    for (const std::string& b : hl::available_backends()) info.backends << QString::fromStdString(b);
    info.loadSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // Only now does the new model replace the old one: a failure above leaves everything as it was.
    model_ = std::move(m);
    merged_.reset();
    adapterDir_.clear();
    tokenizer_ = std::move(tok);
    recA_.reset();
    recB_.reset();
    hidden_.reset();
    runId_ = -1;
    emit modelLoaded(info);
  } catch (const hl::Cancelled&) {
    emit loadFailed(requestId, dir, tr("cancelled"), true);
  } catch (const std::exception& e) {
    emit loadFailed(requestId, dir, qs(e.what()), false);
  }
}

void EngineWorker::measureHardware() {
  if (bandwidth_ <= 0) {
    try {
      bandwidth_ = hl::measure_read_bandwidth_gb_s(2);
    } catch (const std::exception&) {
      bandwidth_ = 0;
    }
  }
  emit hardwareMeasured(bandwidth_);
}

void EngineWorker::loadAdapter(const QString& dir) {
  try {
    if (!model_) throw hl::Error("open a checkpoint before its adapter");
    const hl::Adapter a = hl::load_adapter(localPath(dir), *model_);
    AdapterInfo info;
    info.dir = dir;
    info.isAdapter = true;
    info.isDora = a.config.use_dora;
    info.label = info.isDora ? QStringLiteral("DoRA") : QStringLiteral("LoRA");
    info.rows = hl::dora_rows_adapter(*model_, a);
    info.identity = hl::adapter_identity(localPath(dir));
    // The adapter toggle runs a second copy of the model with the adapter merged (the base copy
    // keeps its memory-mapped weights untouched).
    std::shared_ptr<hl::Model> merged = hl::load_model(model_->dir);
    hl::merge_adapter(*merged, a);
    if (model_->quantization)  // as the base
      hl::quantize_model(*merged, model_->quantization->format, false, {}, model_->quantization->head);
    merged_ = std::move(merged);
    adapterDir_ = dir;
    emit adapterLoaded(info);
  } catch (const std::exception& e) {
    emit adapterFailed(dir, qs(e.what()));
  }
}

void EngineWorker::loadTuned(const QString& dir) {
  try {
    if (!model_) throw hl::Error("open the base checkpoint before the fine-tuned one");
    std::shared_ptr<hl::Model> tuned = hl::load_model(localPath(dir));
    AdapterInfo info;
    info.dir = dir;
    info.isAdapter = false;
    info.label = tr("fine-tuned");
    info.rows = hl::dora_rows_tuned(*model_, *tuned);
    if (info.rows.empty()) throw hl::Error(localPath(dir) + ": no decoder matrix has the shape of the base model's");
    emit adapterLoaded(info);
  } catch (const std::exception& e) {
    emit adapterFailed(dir, qs(e.what()));
  }
}

std::shared_ptr<const hl::Model> EngineWorker::modelFor(const Toggles& t) const {
  if (!model_) throw hl::Error("no checkpoint is loaded");
  if (!t.adapter) return model_;
  if (!merged_) throw hl::Error("the adapter toggle needs an adapter: File > Load adapter…");
  return merged_;
}

std::unique_ptr<hl::Recorder> EngineWorker::makeRecorder(const Toggles& t, const QString& label) const {
  hl::RunOptions o;
  o.normalizer_override = t.normalizerOverride;
  o.normalizer = t.normalizer;
  o.registers = t.registers;
  o.instruments = true;
  o.full = true;  // the attention pattern and Δ heatmaps need the rows
  return std::make_unique<hl::Recorder>(hl::make_backend(backend_.toStdString(), modelFor(t)), o, sampling_,
                                        label.toStdString());
}

void EngineWorker::startRun(const RunRequest& r) {
  try {
    if (!model_) throw hl::Error("no checkpoint is loaded: File > Open checkpoint…");
    const hl::JambaConfig& c = model_->config;
    std::vector<int32_t> ids;
    if (r.useText) {
      if (!tokenizer_) {
        throw hl::Error(model_->dir + " has no tokenizer.json or tokenizer.model: type token ids (\"1, 5, 9\") and choose Token ids");
      }
      ids = hl::encode_prompt(*tokenizer_, r.text.toStdString(), r.addBos, c.bos_token_id);
    } else {
      ids = r.ids;
    }
    if (ids.empty()) throw hl::Error("the prompt gives no tokens");
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= c.vocab_size) {
        throw hl::Error("token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                        " is outside the vocabulary [0, " + std::to_string(c.vocab_size) + ") of config.json");
      }
    }
    backend_ = r.backend;
    sampling_ = r.sampling;
    maxNewTokens_ = r.maxNewTokens;
    recB_.reset();
    hidden_.reset();
    recA_ = makeRecorder(r.toggles, QStringLiteral("A"));
    runId_ = r.runId;
    prompt_ = ids;
    RunStart s;
    s.runId = r.runId;
    s.prompt = r.useText ? r.text : QString();
    s.tokens = ids;
    for (const std::string& t : tokenizer_ ? hl::display_pieces(*tokenizer_, ids) : std::vector<std::string>(ids.size()))
      s.texts.push_back(t);  // byte pieces joined into characters in context
    for (const int32_t id : ids) s.special.push_back(tokenizer_ && tokenizer_->is_special(id) ? 1 : 0);
    s.settings = recA_->run().settings;
    s.backend = QString::fromStdString(recA_->backend().name());
    emit runStarted(s);
  } catch (const std::exception& e) {
    recA_.reset();
    recB_.reset();
    runId_ = -1;
    emit runFailed(r.runId, qs(e.what()));
  }
}

void EngineWorker::endRun() {
  recA_.reset();
  recB_.reset();
  hidden_.reset();
  runId_ = -1;
  prompt_.clear();
  prompt_.shrink_to_fit();
  InspectorContext::releaseMemory();
}

void EngineWorker::step(int runId, int64_t n, int stopEpoch, int64_t maxNewTokens) {
  if (runId != runId_ || !recA_) {
    emit stepDone(runId, tr("no run"));
    return;
  }
  maxNewTokens_ = maxNewTokens;
  QString reason;
  int64_t done = 0;
  const int64_t maxContext = model_->config.max_position_embeddings;
  try {
    while (n < 0 || done < n) {
      if (stopped(stopEpoch)) {
        reason = tr("stopped");
        break;
      }
      const size_t fed = recA_->run().records.size();
      if (static_cast<int64_t>(fed) >= maxContext) {
        reason = tr("context limit (max_position_embeddings %1)").arg(maxContext);
        break;
      }
      StepResult r;
      r.runId = runId;
      if (fed < prompt_.size()) {
        recA_->feed({prompt_[fed]});
      } else {
        const int64_t generated = static_cast<int64_t>(fed - prompt_.size());
        if (n != 1 && recA_->stopped_at_eos() && !sampling_.ignore_eos) {
          reason = tr("end of sequence");
          break;
        }
        if (n < 0 && generated >= maxNewTokens_) {
          reason = tr("%1 new %2").arg(maxNewTokens_).arg(maxNewTokens_ == 1 ? tr("token") : tr("tokens"));
          break;
        }
        recA_->generate_one();
        r.generated = true;
      }
      r.a = recA_->run().records.ptr(recA_->run().records.size() - 1);
      r.runSecondsA = recA_->run().run_seconds;
      r.text = tokenText(r.a->token_id);
      r.special = tokenizer_ && tokenizer_->is_special(r.a->token_id);
      if (recB_) {
        try {
          recB_->feed({r.a->token_id});
          r.hasB = true;
          r.compareId = compareId_;
          r.b = recB_->run().records.ptr(recB_->run().records.size() - 1);
          r.runSecondsB = recB_->run().run_seconds;
        } catch (const std::exception& e) {
          recB_.reset();
          emit compareFailed(runId, compareId_, qs(e.what()));
        }
      }
      emit stepped(r);
      ++done;
    }
  } catch (const std::exception& e) {
    reason = tr("error: %1").arg(qs(e.what()));
    emit runFailed(runId, qs(e.what()));
  }
  emit stepDone(runId, reason);
}

void EngineWorker::setCompare(int runId, int compareId, bool enabled, const Toggles& t, int stopEpoch) {
  if (runId != runId_ || !recA_) return;
  compareId_ = compareId;
  recB_.reset();
  if (!enabled) {
    emit compareReady(runId, compareId, hl::Run{});
    return;
  }
  try {
    std::unique_ptr<hl::Recorder> rec = makeRecorder(t, QStringLiteral("B"));
    const hl::RecordList& a = recA_->run().records;
    const qint64 total = static_cast<qint64>(a.size());
    for (qint64 i = 0; i < total; ++i) {
      if (stopped(stopEpoch)) {
        emit compareFailed(runId, compareId, tr("stopped"));
        return;
      }
      rec->feed({a[i].token_id});
      if ((i + 1) % 8 == 0 || i + 1 == total) emit compareProgress(runId, compareId, i + 1, total);
    }
    recB_ = std::move(rec);
    hl::Run b = recB_->run();
    b.prompt_tokens = recA_->run().prompt_tokens;
    emit compareReady(runId, compareId, b);
  } catch (const std::exception& e) {
    emit compareFailed(runId, compareId, qs(e.what()));
  }
}

void EngineWorker::resume(int runId, const hl::Run& a, bool hasB, const hl::Run& b, int compareId,
                          const QString& backend, int64_t maxNewTokens, int stopEpoch) {
  recA_.reset();
  recB_.reset();
  hidden_.reset();
  runId_ = -1;
  try {
    if (!model_) throw hl::Error("no checkpoint is loaded");
    for (const hl::Run* r : {&a, hasB ? &b : nullptr}) {
      if (r && !r->settings.adapter.empty() && (!merged_ || localPath(adapterDir_) != r->settings.adapter)) {
        throw hl::Error("run " + r->label + " used the adapter " + r->settings.adapter +
                        ": load it (File > Load adapter…) to continue stepping");
      }
    }
    backend_ = backend;
    sampling_ = a.settings.sampling;
    maxNewTokens_ = maxNewTokens;
    auto recA = makeRecorder(togglesOf(a.settings), QStringLiteral("A"));
    const bool complete = recA->replay(a, [&](const hl::TokenTrace&) { return !stopped(stopEpoch); });
    if (!complete) throw hl::Error("stopped while replaying the session");
    std::unique_ptr<hl::Recorder> recB;
    if (hasB) {
      recB = makeRecorder(togglesOf(b.settings), QStringLiteral("B"));
      for (const hl::TokenTrace& t : a.records) {
        if (stopped(stopEpoch)) throw hl::Error("stopped while replaying the session");
        recB->feed({t.token_id});
      }
    }
    prompt_.clear();
    for (int64_t i = 0; i < a.prompt_tokens && i < static_cast<int64_t>(a.records.size()); ++i)
      prompt_.push_back(a.records[i].token_id);
    recA_ = std::move(recA);
    recB_ = std::move(recB);
    runId_ = runId;
    compareId_ = compareId;
    emit resumed(runId, QString());
  } catch (const std::exception& e) {
    emit resumed(runId, qs(e.what()));
  }
}

void EngineWorker::hiddenAttention(int runId, int layer, int token, int head) {
  hl::views::HiddenPattern p;
  p.layer = layer;
  p.token = token;
  p.head = head;
  try {
    if (runId != runId_ || !recA_)
      throw hl::Error("the hidden attention is computed from the live run: open the session's checkpoint to step it again");
    const hl::LayerSchedule& s = model_->schedule;
    if (layer < 0 || layer >= s.size() || !s[layer].has_ssm())
      throw hl::Error("layer " + std::to_string(layer) + " has no SSM part (" + s.describe() + ")");
    const hl::Run& a = recA_->run();
    if (token < 0 || token >= static_cast<int>(a.records.size()))
      throw hl::Error("token " + std::to_string(token) + " is not in run A (" + std::to_string(a.records.size()) + " tokens)");
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    if (!hidden_) hidden_ = std::make_unique<hl::HiddenAttentionTracker>(modelFor(togglesOf(a.settings)), hl::run_options(a.settings));
    if (hidden_->fed() <= token) {
      std::vector<int32_t> ids(static_cast<size_t>(token) + 1);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = a.records[i].token_id;
      hidden_->follow(ids.data(), static_cast<int64_t>(ids.size()));
    }
    const auto t1 = Clock::now();
    const hl::SsmRows& rows = hidden_->layer(s[layer].ssm_index);
    p.mamba1 = rows.mamba1;
    p.heads = static_cast<int>(rows.nh);
    p.dState = static_cast<int>(rows.N);
    p.nReg = hidden_->registers();
    if (head >= p.heads) throw hl::Error("head " + std::to_string(head) + " is out of range [-1, " + std::to_string(p.heads) + ")");
    auto row = [&](int q) {
      std::vector<float> v(static_cast<size_t>(p.nReg + q + 1));
      hl::hidden_attention_head_or_mean_row(rows, head, p.nReg + q, v.data());
      return v;
    };
    p.firstQuery = token;
    p.rows.push_back(row(token));
    const auto t2 = Clock::now();
    const hl::HiddenRowStats st = hl::hidden_row_stats(p.rows[0].data(), static_cast<int64_t>(p.rows[0].size()));
    p.entropy = st.entropy;
    p.entropyNorm = st.entropy_norm;
    p.firstMass = st.first_mass;
    p.catchUpMs = std::chrono::duration<double, std::milli>(t1 - t0).count();
    p.rowMs = std::chrono::duration<double, std::milli>(t2 - t1).count();
    const int first = std::max(0, static_cast<int>(hl::hidden_attention_window_start(rows, head, p.nReg + token, hl::kHiddenWindowBudget)) - p.nReg);
    p.complete = first == token;
    emit hiddenAttentionReady(runId, p);
    if (p.complete) return;
    std::vector<std::vector<float>> earlier;
    for (int q = first; q < token; ++q) earlier.push_back(row(q));
    earlier.push_back(std::move(p.rows.back()));
    p.rows = std::move(earlier);
    p.firstQuery = first;
    p.complete = true;
  } catch (const std::exception& e) {
    p.rows.clear();
    p.error = e.what();
  }
  emit hiddenAttentionReady(runId, p);
}

}  // namespace hl::app
