//! Messages in Python's terms, for the Python package to raise: the facade's messages name command-line flags (`add a fallback
//! device that supports it, e.g. --devices nnapi,cpu`); raised in Python they name the keyword
//! arguments that do the same (`devices=["nnapi", "cpu"]`). A flag in a `cleave COMMAND ...`
//! suggestion stays as it is: that is a command to run.

/// `message` with each flag the Python API has a keyword for spelled as that keyword.
pub fn python_terms(message: &str) -> String {
    let mut out = String::with_capacity(message.len() + 16);
    let mut rest = message;
    while let Some(at) = rest.find("--") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let flag_len = from[2..]
            .find(|c: char| !(c.is_ascii_lowercase() || c == '-'))
            .map_or(from.len(), |n| n + 2);
        let flag = &from[2..flag_len];
        let after = &from[flag_len..];
        match keyword(flag).filter(|_| !in_command(&out)) {
            // `--devices: 'x' is listed twice` names the argument itself.
            Some(kw) if after.starts_with(':') => {
                out.push_str(kw);
                rest = after;
            }
            Some(kw) => {
                let (value, used) = value_of(after);
                out.push_str(&spell(kw, value));
                rest = &after[used..];
            }
            None => {
                out.push_str(&from[..flag_len]);
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The keyword for a flag, when the Python API has one.
fn keyword(flag: &str) -> Option<&'static str> {
    Some(match flag {
        "devices" => "devices",
        "shape" => "shape",
        "dim" => "dim",
        "memory" => "memory",
        "stages" => "stages",
        "costs" => "costs",
        "profile" => "profiles",
        "part" => "rules",
        "optimize" => "optimize",
        "objective" => "objective",
        "no-constraints" => "no_constraints",
        "allow-disconnected" => "allow_disconnected",
        "external-data" => "external_data",
        "algorithm" => "algorithm",
        "engine" => "engines",
        "default" => "default",
        "margin" => "margin",
        "state" => "state",
        "context" => "context",
        "batch" => "batch",
        _ => return None,
    })
}

/// Whether the text so far ends inside a `cleave COMMAND ...` suggestion.
fn in_command(so_far: &str) -> bool {
    let clause = so_far
        .rfind([';', ':', '(', ')', '.'])
        .map_or(so_far, |i| &so_far[i + 1..]);
    clause.contains("cleave ")
}

/// The flag's value as the message writes it (` VALUE`), and the bytes it takes; none when
/// the flag is only named (`use --devices (e.g. ...)`, `--memory needs ...`).
fn value_of(after: &str) -> (Option<&str>, usize) {
    let Some(v) = after.strip_prefix(' ') else {
        return (None, 0);
    };
    let len = v
        .find(|c: char| c.is_whitespace() || matches!(c, ';' | ')' | '(' | '\'' | '"'))
        .unwrap_or(v.len());
    let raw = &v[..len];
    // `D,D,...` keeps its ellipsis; otherwise a trailing comma or stop is the sentence's.
    let value = if raw.ends_with("...") {
        raw
    } else {
        raw.trim_end_matches([',', '.'])
    };
    // A trailing ':' ends the clause (`--shape x=1,2: dim ...`) unless it is the value's
    // own (`--devices ov: names no OpenVINO device`).
    let found = [value.strip_suffix(':'), Some(value)]
        .into_iter()
        .flatten()
        .find(|c| plausible(c));
    match found {
        Some(c) => (Some(c), 1 + c.len()),
        None => (None, 0),
    }
}

/// Whether a word after a flag is its value: it has the marks of one (`a,b`, `x=1`,
/// `file.toml`, `ov:GPU`), is a number, or a placeholder (`FILE`, `N`); a lower-case word is
/// the sentence going on.
fn plausible(v: &str) -> bool {
    !v.is_empty()
        && v.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.,=:/-+*".contains(c))
        && (v.contains([',', '=', '.', '/', ':'])
            || v.chars().all(|c| c.is_ascii_digit())
            || v.chars().all(|c| c.is_ascii_uppercase()))
}

fn spell(kw: &str, value: Option<&str>) -> String {
    let Some(v) = value else {
        return format!("{kw}=");
    };
    let quoted = |s: &str| format!("\"{s}\"");
    let number_or_word = |s: &str| {
        if s.parse::<i64>().is_ok() || s.chars().all(|c| c.is_ascii_uppercase()) {
            s.to_string()
        } else {
            quoted(s)
        }
    };
    match kw {
        "devices" | "profiles" => {
            let items: Vec<String> = v.split(',').map(quoted).collect();
            format!("{kw}=[{}]", items.join(", "))
        }
        "shape" => match v.split_once('=') {
            Some((name, dims)) => {
                let dims: Vec<&str> = dims.split(',').collect();
                let tuple = if dims.len() == 1 {
                    format!("({},)", dims[0])
                } else {
                    format!("({})", dims.join(", "))
                };
                format!("shape={{\"{name}\": {tuple}}}")
            }
            None => format!("shape={v}"),
        },
        "dim" | "memory" | "state" => {
            let pairs: Vec<String> = v
                .split(',')
                .map(|p| match p.split_once('=') {
                    Some((k, x)) if kw != "dim" => format!("\"{k}\": \"{x}\""),
                    Some((k, x)) => format!("\"{k}\": {}", number_or_word(x)),
                    None => quoted(p),
                })
                .collect();
            format!("{kw}={{{}}}", pairs.join(", "))
        }
        "stages" | "context" | "batch" => format!("{kw}={}", number_or_word(v)),
        _ => format!("{kw}={}", number_or_word(v)),
    }
}

#[cfg(test)]
mod tests {
    use super::python_terms;

    #[test]
    fn flags_become_keywords_and_commands_stay() {
        let cases = [
            (
                "[NNAPI] Cannot convert layer y; add a fallback device that supports it, e.g. --devices nnapi,cpu",
                "[NNAPI] Cannot convert layer y; add a fallback device that supports it, e.g. devices=[\"nnapi\", \"cpu\"]",
            ),
            (
                "--learn-dims runs the model, so input 'x' (f32[?]) needs a fixed shape: give --shape x=D,D,...",
                "--learn-dims runs the model, so input 'x' (f32[?]) needs a fixed shape: give shape={\"x\": (D, D, ...)}",
            ),
            (
                "--shape x=1,16,7,1: dim 2 of input 'x' is fixed at 6 in the model",
                "shape={\"x\": (1, 16, 7, 1)}: dim 2 of input 'x' is fixed at 6 in the model",
            ),
            (
                "--stages 3 with --memory needs 3 devices in --devices, one per stage",
                "stages=3 with memory= needs 3 devices in devices=, one per stage",
            ),
            (
                "device 'npu' has no figures here: profile it with cleave profile --devices npu, or declare [cost] in its profile",
                "device 'npu' has no figures here: profile it with cleave profile --devices npu, or declare [cost] in its profile",
            ),
            (
                "tensor 't' has no static size: fix its dims with --shape or --dim",
                "tensor 't' has no static size: fix its dims with shape= or dim=",
            ),
            ("--dim batch=2 clashes", "dim={\"batch\": 2} clashes"),
            (
                "no devices given: use --devices (e.g. --devices myriad,cpu) or --part FILE.part",
                "no devices given: use devices= (e.g. devices=[\"myriad\", \"cpu\"]) or rules=\"FILE.part\"",
            ),
            ("/data/my--model.onnx: truncated", "/data/my--model.onnx: truncated"),
            (
                "--devices ov: names no OpenVINO device (e.g. ov:CPU, ov:GPU.1)",
                "devices=[\"ov:\"] names no OpenVINO device (e.g. ov:CPU, ov:GPU.1)",
            ),
            (
                "--devices ov:GPU: cannot run python3 to ask OpenVINO",
                "devices=[\"ov:GPU\"]: cannot run python3 to ask OpenVINO",
            ),
            (
                "--devices: 'cpu' is empty or listed twice",
                "devices: 'cpu' is empty or listed twice",
            ),
            (
                "give --costs FILE (from cleave profile) or declare [cost] in its profile",
                "give costs=FILE (from cleave profile) or declare [cost] in its profile",
            ),
            (
                "fingerprint 1a; this is 9 nodes, 2b): profile this model with the flags that file was profiled with: cleave profile MODEL --shape x=1,3 --optimize basic ...",
                "fingerprint 1a; this is 9 nodes, 2b): profile this model with the flags that file was profiled with: cleave profile MODEL --shape x=1,3 --optimize basic ...",
            ),
            ("--memory needs --stages N", "memory= needs stages=N"),
            (
                "declare its pair with --state cache.0=OUTPUT",
                "declare its pair with state={\"cache.0\": \"OUTPUT\"}",
            ),
            ("--state: 'x' is not an input", "state: 'x' is not an input"),
            (
                "stage times are estimated FLOPs (give --costs from cleave profile for seconds)",
                "stage times are estimated FLOPs (give costs= from cleave profile for seconds)",
            ),
        ];
        for (cli, py) in cases {
            assert_eq!(python_terms(cli), py, "{cli}");
        }
    }
}
