#include "examples/survival/risk_groups.h"

#include <cstdio>

#include <torch/torch.h>

#include "examples/frame/outputs_observer.h"
#include "examples/survival/kaplan_meier.h"
#include "examples/survival/survival_curves.h"

namespace ddprun::examples {

StatusOr<torch::Tensor> RiskGroupsPicture(const std::vector<double>& risk,
                                          const std::vector<double>& time,
                                          const std::vector<double>& event,
                                          const std::string& when) {
  if (risk.empty() || risk.size() != time.size() ||
      risk.size() != event.size()) {
    return InvalidArgumentError(
        "risk groups need one risk, time and event per validation subject");
  }
  std::vector<bool> high = HighRiskHalf(risk);
  std::vector<bool> low(high.size());
  for (size_t i = 0; i < high.size(); ++i) low[i] = !high[i];
  std::vector<outputs::SurvivalCurve> curves;
  for (const auto* group : {&low, &high}) {
    const KaplanMeierEstimate km = KaplanMeier(time, event, *group);
    outputs::SurvivalCurve c;
    c.label = std::string(group == &low ? "low" : "high") +
              " risk (n=" + std::to_string(km.subjects) + ", " +
              std::to_string(km.events) + " events)";
    c.times = km.times;
    c.survival = km.survival;
    c.censored = km.censored;
    curves.push_back(std::move(c));
  }
  const LogRankResult test = LogRank(time, event, high);
  char p[32];
  std::snprintf(p, sizeof(p), "%.2g", test.p);
  const std::string title = "validation, " + when +
                            ": Kaplan-Meier by predicted risk (above / below "
                            "the median), log-rank p = " +
                            p;
  DDP_ASSIGN_OR_RETURN(
      outputs::RasterImage image,
      outputs::PlotSurvivalCurves(title, curves, {/*blue=*/0, /*red=*/3}));
  return RasterToImage(image);
}

}  // namespace ddprun::examples
