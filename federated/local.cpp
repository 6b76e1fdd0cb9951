#include "federated/local.h"

#include "core/module.h"
#include "distill/distiller.h"
#include "distill/teacher.h"
#include "train/trainer.h"

namespace pare::federated {

LocalResult train_local(const core::Graph& global, const Layout& layout, const core::TensorDataset& data,
                        const LocalTraining& how, uint64_t seed) {
  core::require_labels(data, "local training");
  core::Module model(global);
  auto opts = train::TrainerOptions()
                  .epochs(how.epochs)
                  .batch_size(how.batch_size)
                  .lr(how.lr)
                  .optimizer(how.optimizer)
                  .momentum(how.momentum)
                  .seed(seed)
                  .progress(false);
  std::vector<train::EpochStats> history;
  if (how.kd_alpha > 0) {
    engine::TorchEngine teacher(global, "the round's global model");
    history = distill::distill(model, teacher,
                               distill::DistillLossOptions().temperature(how.kd_temperature).alpha(how.kd_alpha), opts,
                               data, nullptr);
  } else {
    history = train::Trainer(model, opts).fit(data, nullptr);
  }
  LocalResult r;
  const core::Graph trained = model.to_graph();
  r.update = difference(state_of(trained, layout), state_of(global, layout), layout);
  for (const auto& e : history) r.seconds += e.seconds;
  r.train_loss = history.empty() ? 0 : history.back().train_loss;
  return r;
}

}  // namespace pare::federated
