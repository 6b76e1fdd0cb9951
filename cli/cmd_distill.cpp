// pare distill --teacher T [--teacher T2 --teacher-weights 0.7,0.3] --student S --data D [loss and
// training options] --out student.onnx
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/data.h"
#include "core/error.h"
#include "core/onnx_io.h"
#include "distill/distiller.h"
#include "distill/student.h"
#include "distill/teacher_cache.h"

namespace pare::cli {

namespace {
// "teacher_value:student_value[:weight]"
distill::ValuePair parse_pair(const std::string& s, const char* option) {
  std::vector<std::string> parts;
  std::stringstream ss(s);
  for (std::string p; std::getline(ss, p, ':');) parts.push_back(p);
  PARE_CHECK((parts.size() == 2 || parts.size() == 3) && !parts[0].empty() && !parts[1].empty(),
             option, " expects TEACHER_VALUE:STUDENT_VALUE[:WEIGHT], got '", s, "'");
  distill::ValuePair v{parts[0], parts[1], 1.0};
  if (parts.size() == 3) {
    try {
      v.weight = std::stod(parts[2]);
    } catch (const std::exception&) {
      PARE_CHECK(false, option, " ", s, ": the weight '", parts[2], "' is not a number");
    }
  }
  return v;
}
}  // namespace

void add_distill(CLI::App& app, Action& action) {
  auto* cmd = app.add_subcommand("distill", "Distill a student from one or more teachers");
  struct Opts {
    std::vector<std::string> teachers, hints, attentions;
    std::vector<double> teacher_weights;
    std::string student, out;
    TeacherSharding sharding;
    TrainingRun run;
    distill::DistillLossOptions loss;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("--teacher,-t", o->teachers, "Teacher: ONNX file, zoo spec, TorchScript (.pt) or cache:DIR (pare teacher-cache); repeat for an ensemble (loading TorchScript runs the code in the file, as torch.load of a pickle does: only files you trust)")
      ->required();
  cmd->add_option("--teacher-weights", o->teacher_weights, "Ensemble weights, e.g. 0.7,0.3 (default: equal)")
      ->delimiter(',');
  o->sharding.add_options(cmd);
  cmd->add_option("--student,-s", o->student, "Student: zoo spec, ONNX file, or from-teacher:layers=0,2,4 (the teacher's layers 0, 2 and 4, with its weights)")->required();
  cmd->add_option("--out,-o", o->out, "Where to write the student (.onnx)")->required();
  auto g = "Distillation";
  cmd->add_option("--temperature,-T", o->loss.temperature_, "Softmax temperature of the KD term")
      ->capture_default_str()->group(g);
  cmd->add_option("--alpha", o->loss.alpha_, "Weight of the KD term; labels' cross entropy gets 1 - alpha")
      ->capture_default_str()->group(g);
  cmd->add_option("--mse", o->loss.mse_weight_, "Weight of an MSE term on the logits")->group(g);
  cmd->add_option("--cosine", o->loss.cosine_weight_, "Weight of a cosine term on the logits")->group(g);
  cmd->add_option("--hint", o->hints, "Feature hint TEACHER_VALUE:STUDENT_VALUE[:WEIGHT] (repeatable)")->group(g);
  cmd->add_option("--attention", o->attentions, "Attention transfer TEACHER_VALUE:STUDENT_VALUE[:WEIGHT]")->group(g);
  o->run.add_options(cmd);
  cmd->callback([&action, o] {
    action = [o] {
      const TrainingRun& run = o->run;
      train::TrainerOptions topts = run.start();
      distill::DistillLossOptions lopts = o->loss;
      lopts.seed(topts.seed_);
      for (auto& h : o->hints) {
        auto p = parse_pair(h, "--hint");
        lopts.hint(p.teacher_value, p.student_value, p.weight);
      }
      for (auto& a : o->attentions) {
        auto p = parse_pair(a, "--attention");
        lopts.attention(p.teacher_value, p.student_value, p.weight);
      }
      lopts.validate();
      auto teacher = o->sharding.load(o->teachers, o->teacher_weights, topts.seed_, topts.process_group_, run.quiet);
      const bool sharded = dynamic_cast<engine::ShardedEngine*>(teacher.get()) != nullptr;
      core::Graph g = [&] {
        if (!distill::is_derived_spec(o->student)) return core::load_model(o->student, topts.seed_);
        PARE_CHECK(o->teachers.size() == 1, "--student ", o->student, " derives the student from one teacher, but ",
                   o->teachers.size(), " teachers were given");
        return distill::derive_student(core::load_model(o->teachers[0], topts.seed_), o->student, o->teachers[0]);
      }();
      core::TensorDataset train, val;
      const core::TensorDataset* val_ptr = run.load_data(train, val, g, topts);
      core::Module student(std::move(g));
      if (!run.quiet && topts.is_writer())
        std::fprintf(stderr, "distilling %s (%lld parameters) from %s on %s: T=%g alpha=%g\n",
                     o->student.c_str(), (long long)student.parameter_count(),
                     teacher->describe().c_str(), train.name.c_str(), lopts.temperature_, lopts.alpha_);
      auto history = distill::distill(student, *teacher, lopts, topts, train, val_ptr);
      core::Graph trained = student.to_graph();
      trained.metadata["pare.distilled_from"] = [&] {
        std::string s;
        for (auto& t : o->teachers) s += (s.empty() ? "" : ",") + t;
        return s;
      }();
      // The teacher's accuracy on the same split, for the side-by-side report (a cache holds only
      // the training rows). A sharded teacher's forward is collective: every rank takes part.
      double teacher_acc = -1;
      const bool cached = dynamic_cast<engine::CachedEngine*>(teacher.get()) != nullptr;
      if (!run.no_val && !cached && (topts.is_writer() || sharded))
        teacher_acc = train::evaluate([&](const at::Tensor& x) { return teacher->logits(x); }, val, 512,
                                      teacher->describe()).accuracy;
      if (!topts.is_writer()) return;  // rank 0 writes the model and reports
      core::save_onnx(trained, o->out);
      nlohmann::json j = {{"student", o->student}, {"out", o->out}, {"epochs", history.size()},
                          {"train_loss", history.back().train_loss}};
      if (!run.no_val) {
        j["student_accuracy"] = history.back().val_accuracy;
        std::string teacher_part = "teacher (cached) -";
        if (teacher_acc >= 0) {
          j["teacher_accuracy"] = teacher_acc;
          char buf[64];
          std::snprintf(buf, sizeof(buf), "teacher %.2f%%", teacher_acc * 100);
          teacher_part = buf;
        }
        if (!run.quiet)
          std::fprintf(stderr, "%s accuracy: %s, student %.2f%%\n", run.val_split.c_str(), teacher_part.c_str(),
                       history.back().val_accuracy * 100);
      }
      if (run.json) std::cout << j.dump() << "\n";
      else if (!run.quiet) std::fprintf(stderr, "wrote %s\n", o->out.c_str());
    };
  });
}

}  // namespace pare::cli
