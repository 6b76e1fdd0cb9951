#include "federated/feddf.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/module.h"
#include "distill/distiller.h"
#include "distill/teacher.h"
#include "train/trainer.h"

namespace pare::federated {

void feddf_distill(RoundState& state, const std::vector<core::Graph>& before, const std::vector<Answer>& got,
                   const ServerOptions& o, const core::TensorDataset& inputs, RoundStats& st) {
  std::vector<core::Graph>& models = state.models;
  const std::vector<Layout>& layouts = state.layouts;
  std::vector<std::unique_ptr<distill::Teacher>> members;
  for (const Answer& a : got) {
    core::Graph g = before[a.arch];
    apply_update(g, flatten(a.update, layouts[a.arch]), layouts[a.arch]);
    members.push_back(std::make_unique<engine::TorchEngine>(std::move(g), "client " + a.client));
  }
  distill::EnsembleTeacher ensemble(std::move(members), {});
  using C = distill::EnsembleTeacher::Combine;
  ensemble.set_combine(o.ensemble == "median" ? C::kMedian : o.ensemble == "trimmed-mean" ? C::kTrimmedMean : C::kMean,
                       o.agg.trim);
  core::TensorDataset set = inputs;
  std::vector<at::Tensor> labels;
  for (int64_t i = 0; i < set.size(); i += 512)
    labels.push_back(ensemble.logits(set.x.narrow(0, i, std::min<int64_t>(512, set.size() - i))).argmax(1));
  set.y = at::cat(labels);
  const int64_t held = std::min<int64_t>(set.size() - 1, std::llround(o.distill_val * double(set.size())));
  core::TensorDataset val{set.x.narrow(0, set.size() - held, held), set.y.narrow(0, set.size() - held, held),
                          "the held-out distillation inputs"};
  set = {set.x.narrow(0, 0, set.size() - held), set.y.narrow(0, 0, set.size() - held), set.name};
  for (size_t k = 0; k < models.size(); ++k) {
    core::Module student(models[k]);
    auto opts = train::TrainerOptions()
                    .epochs(o.distill_epochs)
                    .batch_size(o.distill_batch)
                    .lr(o.distill_lr)
                    .optimizer("adam")
                    .seed(o.seed * 7 + uint64_t(st.round) * 131 + k)
                    .progress(false);
    // With a hold-out, each model keeps the epoch agreeing best with the ensemble there; epoch 0 is
    // the aggregate, models[k] as it stands.
    double best = held > 0 ? train::evaluate(student, val).accuracy : 0;
    int64_t kept = 0;
    distill::distill(student, ensemble, distill::DistillLossOptions().temperature(o.distill_temperature).alpha(1.0),
                     opts, set, held > 0 ? &val : nullptr, [&](train::Trainer& t) {
                       t.on_epoch([&](const train::EpochStats& es) {
                         if (held == 0 || es.val_accuracy <= best) return;
                         best = es.val_accuracy;
                         kept = es.epoch;
                         models[k] = student.to_graph();
                       });
                     });
    if (held == 0)
      models[k] = student.to_graph();
    else
      st.distill_kept.push_back(kept);
  }
}

}  // namespace pare::federated
