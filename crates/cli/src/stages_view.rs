//! The table `partition --stages` prints: per stage, what it holds, moves and costs.

use cleave::{human_bytes, StageTime, Stages};

fn time(t: StageTime, v: f64) -> String {
    match t {
        StageTime::Seconds => format!("{:.3} ms", v * 1e3),
        StageTime::Flops => format!("{:.3} GFLOP", v / 1e9),
    }
}

pub fn table(s: &Stages) -> Vec<String> {
    let mut lines = vec![format!(
        "  {:<5}  {:<10}  {:>6}  {:>11}  {:>11}  {:>11}  {:>11}  {:>14}  {:>11}  {:>11}",
        "stage", "device", "nodes", "weights", "act. peak", "memory", "budget", "time", "in", "out"
    )];
    for (k, f) in s.plan.stages.iter().enumerate() {
        lines.push(format!(
            "  {:<5}  {:<10}  {:>6}  {:>11}  {:>11}  {:>11}  {:>11}  {:>14}  {:>11}  {:>11}",
            k + 1,
            s.devices[k],
            s.nodes[k],
            human_bytes(f.weights),
            human_bytes(f.activation_peak),
            human_bytes(f.memory()),
            f.budget.map_or_else(|| "-".to_string(), human_bytes),
            time(s.time, f.time),
            human_bytes(f.in_bytes),
            human_bytes(f.out_bytes),
        ));
    }
    let (k, slowest) = s
        .plan
        .stages
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.time.total_cmp(&b.1.time))
        .map_or((0, 0.0), |(k, f)| (k, f.time));
    let source = match s.time {
        StageTime::Seconds => "stage times from the cost figures".to_string(),
        StageTime::Flops => {
            "stage times are estimated FLOPs (give --costs from cleave profile for seconds)"
                .to_string()
        }
    };
    let rate = match s.time {
        StageTime::Seconds if slowest > 0.0 => {
            format!(
                ", at most {:.1} results/s through the pipeline",
                1.0 / slowest
            )
        }
        _ => String::new(),
    };
    lines.push(format!(
        "bottleneck: stage {} on {}, {}{rate}; {source}",
        k + 1,
        s.devices[k],
        time(s.time, slowest)
    ));
    lines
}
