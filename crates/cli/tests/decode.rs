//! Decoder LLMs: state pairs recognised and declared, recorded per part in conn.json, and
//! generation through the parts. scripts/testdata/make_decoder_models.py builds two small
//! decoders with random weights (a Llama-style one named as Optimum names its cache, a GPT-style
//! one whose cache only --state names); scripts/oracles/check_generate.py decodes the whole
//! model on onnxruntime without a cache (the whole sequence at every step), the independent
//! reference for the parts' tokens.

mod common;

use std::path::{Path, PathBuf};

use common::*;

fn models() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    python(
        "testdata/make_decoder_models.py",
        &[dir.path().to_str().unwrap()],
    );
    dir
}

fn gpt_state() -> Vec<String> {
    (0..4)
        .flat_map(|i| {
            [
                format!("cache.{i}.k_in=cache.{i}.k_out"),
                format!("cache.{i}.v_in=cache.{i}.v_out"),
            ]
        })
        .collect()
}

fn state_flags(pairs: &[String]) -> Vec<&str> {
    pairs.iter().flat_map(|p| ["--state", p.as_str()]).collect()
}

fn oracle(model: &Path, prompt: &str, n: usize, state: &[String]) -> Vec<i64> {
    let n = n.to_string();
    let mut args = vec![
        model.to_str().unwrap(),
        "--prompt-ids",
        prompt,
        "--max-new-tokens",
        &n,
    ];
    args.extend(state_flags(state));
    let v: serde_json::Value =
        serde_json::from_str(python("oracles/check_generate.py", &args).trim()).unwrap();
    serde_json::from_value(v["tokens"].clone()).unwrap()
}

fn partition(model: &Path, stages: usize, out: &Path, state: &[String]) -> PathBuf {
    let stages = stages.to_string();
    let mut args = vec![
        os("partition"),
        model.as_os_str(),
        os("--stages"),
        os(&stages),
        os("-o"),
        out.as_os_str(),
    ];
    args.extend(state_flags(state).into_iter().map(os));
    ok(&cleave(&args));
    out.join(format!(
        "{}.conn.json",
        model.file_stem().unwrap().to_string_lossy()
    ))
}

fn generate(conn: &Path, prompt: &str, n: usize, extra: &[&str]) -> serde_json::Value {
    let n = n.to_string();
    let mut args = vec![
        os("generate"),
        conn.as_os_str(),
        os("--prompt-ids"),
        os(prompt),
        os("--max-new-tokens"),
        os(&n),
        os("--json"),
    ];
    args.extend(extra.iter().map(os));
    serde_json::from_str(ok(&cleave(&args)).trim()).unwrap()
}

fn conn(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn tokens(v: &serde_json::Value) -> Vec<i64> {
    serde_json::from_value(v["tokens"].clone()).unwrap()
}

#[test]
fn parts_generate_the_whole_models_tokens_with_each_cache_kept_in_its_part() {
    let dir = models();
    let llama = dir.path().join("tiny_llama.onnx");
    let want = oracle(&llama, "1,2,3", 12, &[]);
    assert_eq!(want.len(), 12);
    // inspect shows the pairs it recognises.
    let shown = ok(&cleave(&[os("inspect"), llama.as_os_str()]));
    assert!(
        shown.contains("state      8 pairs, a decoder's KV cache (past_key_values.0.key -> present.0.key, past_key_values.0.value -> present.0.value, and 6 more)"),
        "{shown}"
    );
    let shown: serde_json::Value = serde_json::from_str(&ok(&cleave(&[
        os("inspect"),
        llama.as_os_str(),
        os("--json"),
    ])))
    .unwrap();
    assert_eq!(shown["state"]["past_key_values.2.key"], "present.2.key");
    // A wiring bug changes tokens only if they vary: random weights that repeat one token
    // would hide it.
    let distinct: std::collections::BTreeSet<_> = want.iter().collect();
    assert!(distinct.len() >= 4, "{want:?}");
    for stages in [1, 2, 4] {
        let out = dir.path().join(format!("llama{stages}"));
        let c = partition(&llama, stages, &out, &[]);
        let record = conn(&c);
        // Every pair recognised from Optimum's names, recorded in the source and in the one
        // part that reads the past and gives the present.
        let state = record["source"]["state"].as_object().unwrap();
        assert_eq!(state.len(), 8, "{record}");
        assert_eq!(state["past_key_values.3.value"], "present.3.value");
        let mut held = 0;
        for p in record["parts"].as_array().unwrap() {
            for (i, o) in p["state"].as_object().into_iter().flatten() {
                assert!(p["inputs"].as_array().unwrap().iter().any(|x| x == i));
                assert!(p["outputs"].as_array().unwrap().iter().any(|x| x == o));
                held += 1;
            }
        }
        assert_eq!(held, 8, "each pair in exactly one part: {record}");
        // Stages hold whole layers, each at least one: a layer's key and value together.
        for p in record["parts"].as_array().unwrap() {
            let keys: Vec<&String> = p["state"].as_object().unwrap().keys().collect();
            assert!(!keys.is_empty() && keys.len().is_multiple_of(2), "{record}");
            for k in keys.iter().filter(|k| k.ends_with(".key")) {
                let v = k.replace(".key", ".value");
                assert!(keys.contains(&&v), "{k} without {v}: {record}");
            }
        }
        // Each stage computes the mask and positions itself, from the model's own inputs.
        for p in record["parts"].as_array().unwrap() {
            let inputs = p["inputs"].as_array().unwrap();
            assert!(inputs.iter().any(|x| x == "position_ids"), "{record}");
        }
        ok(&cleave(&[os("check"), c.as_os_str()]));
        for engine in ["tract", "ort"] {
            let engines = (1..=stages)
                .map(|k| format!("stage{k}={engine}"))
                .collect::<Vec<_>>()
                .join(",");
            let got = generate(&c, "1,2,3", 12, &["--engine", &engines]);
            assert_eq!(tokens(&got), want, "{stages} stages on {engine}");
            assert_eq!(got["parts"], stages);
            // The caches stay in the parts: 4 layers x K and V x [1, 2 heads, 14 tokens, 8].
            assert_eq!(got["state_bytes"], 4 * 2 * 2 * 14 * 8 * 4);
        }
        // verify --generate: the parts' tokens and every step's logits against the whole
        // model, on the same engine.
        let v = ok(&cleave(&[
            os("verify"),
            llama.as_os_str(),
            c.as_os_str(),
            os("--generate"),
            os("8"),
            os("--reference"),
            os("ort"),
            os("--engine"),
            os(&(1..=stages)
                .map(|k| format!("stage{k}=ort"))
                .collect::<Vec<_>>()
                .join(",")),
            os("--json"),
        ]));
        let v: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
        assert_eq!(v["passed"], true, "{v}");
        assert_eq!(tokens(&v), want[..8].to_vec());
        // Between stages only the hidden state crosses (32 floats a token), whatever the
        // context: no K or V, no mask.
        let hops: Vec<u64> = serde_json::from_value(v["hop_bytes_per_token"].clone()).unwrap();
        assert_eq!(hops.len(), 7);
        assert!(
            hops.iter().all(|&h| h == 128 * (stages as u64 - 1)),
            "{stages} stages: {hops:?}"
        );
    }
}

#[test]
fn a_cache_named_otherwise_is_declared_with_state_and_sampling_repeats_with_its_seed() {
    let dir = models();
    let gpt = dir.path().join("tiny_gpt.onnx");
    let pairs = gpt_state();
    let want = oracle(&gpt, "5,9", 10, &pairs);
    // Undeclared, the cache inputs are not something generate can feed: it says which.
    let bare = partition(&gpt, 2, &dir.path().join("bare"), &[]);
    assert!(conn(&bare)["source"].get("state").is_none());
    let o = cleave(&[
        os("generate"),
        bare.as_os_str(),
        os("--prompt-ids"),
        os("5,9"),
    ]);
    assert_bad_input(&o, &bare, "input 'cache.0.k_in' is neither input_ids");
    // Declared at generate time, or recorded by partition --state: the same tokens.
    let at_run = generate(&bare, "5,9", 10, &state_flags(&pairs));
    assert_eq!(tokens(&at_run), want);
    let c = partition(&gpt, 2, &dir.path().join("declared"), &pairs);
    assert_eq!(conn(&c)["source"]["state"]["cache.2.v_in"], "cache.2.v_out");
    assert_eq!(tokens(&generate(&c, "5,9", 10, &[])), want);
    // A declaration that names no input is refused, naming it.
    let o = cleave(&[
        os("partition"),
        gpt.as_os_str(),
        os("--stages"),
        os("2"),
        os("-o"),
        dir.path().join("bad").as_os_str(),
        os("--state"),
        os("cache.0.k_out=cache.0.k_in"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--state: 'cache.0.k_out' is not an input of the model"),
        "{}",
        stderr(&o)
    );
    // A prompt as text, through the tokenizer.json beside the model: the same tokens, and
    // the text they spell.
    let text = ok(&cleave(&[
        os("generate"),
        c.as_os_str(),
        os("--prompt"),
        os("w5 w9"),
        os("--max-new-tokens"),
        os("10"),
        os("--json"),
    ]));
    let text: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(tokens(&text), want);
    let words: Vec<String> = want.iter().map(|t| format!("w{t}")).collect();
    assert_eq!(text["text"], words.join(" "));
    std::fs::remove_file(dir.path().join("tokenizer.json")).unwrap();
    let o = cleave(&[os("generate"), c.as_os_str(), os("--prompt"), os("w5 w9")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--prompt needs a tokenizer: none at"),
        "{}",
        stderr(&o)
    );
    // Sampling: the seed decides, within top-k.
    let sample = |seed: &str| {
        tokens(&generate(
            &c,
            "5,9",
            10,
            &["--temperature", "1.5", "--top-k", "5", "--seed", seed],
        ))
    };
    assert_eq!(sample("3"), sample("3"));
    assert_ne!(sample("3"), sample("4"));
    // A stop token ends the generation at its first appearance.
    let stop = want[3].to_string();
    let stopped = tokens(&generate(&c, "5,9", 10, &["--stop-ids", &stop]));
    let first = want.iter().position(|&t| t == want[3]).unwrap();
    assert_eq!(stopped, want[..=first].to_vec());
}

#[test]
fn stages_are_counted_at_a_context_and_the_parts_stay_dynamic() {
    let dir = models();
    let llama = dir.path().join("tiny_llama.onnx");
    let stage = |context: &str, budget: &str| {
        let out = dir.path().join(format!("ctx{context}-{budget}"));
        let o = cleave(&[
            os("partition"),
            llama.as_os_str(),
            os("--stages"),
            os("2"),
            os("--devices"),
            os("gpu0,gpu1"),
            os("--memory"),
            os(&format!("gpu0={budget},gpu1={budget}")),
            os("--context"),
            os(context),
            os("-o"),
            out.as_os_str(),
        ]);
        (o, out.join("tiny_llama.conn.json"))
    };
    // Without a context the dynamic dims cannot be counted; the message says how.
    let o = cleave(&[
        os("partition"),
        llama.as_os_str(),
        os("--stages"),
        os("2"),
        os("--devices"),
        os("gpu0,gpu1"),
        os("--memory"),
        os("gpu0=1GB,gpu1=1GB"),
        os("--dry-run"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--context T"), "{}", stderr(&o));
    // At 1024 tokens each stage holds two layers' caches: 2 layers x K, V x [1, 2, T, 8]
    // float32, past and present (1023 and 1024 tokens), beside its ~77 KiB of weights; at
    // its peak also one layer's K or V expanded to the 4 query heads.
    let (o, conn_path) = stage("1024", "1MB");
    let out = ok(&o);
    let record = conn(&conn_path);
    let kv = 2 * 2 * 2 * 8 * 4 * (1023 + 1024);
    for p in record["parts"].as_array().unwrap() {
        let weights = p["weights_bytes"].as_u64().unwrap();
        let peak = p["activation_peak_bytes"].as_u64().unwrap();
        assert!(weights > 60_000 && weights < 120_000, "{out}");
        assert!(
            peak >= kv && peak < 2 * kv,
            "peak {peak} against KV {kv}: {out}"
        );
    }
    // The parts keep the model's dynamic dims: they decode at any context.
    assert_eq!(
        record["source"]["shapes"]["past_key_values.0.key"][2],
        "past_sequence_length"
    );
    assert_eq!(
        tokens(&generate(&conn_path, "1,2,3", 6, &[])),
        oracle(&llama, "1,2,3", 6, &[])
    );
    // A budget the caches do not fit at that context is refused, naming the stage.
    let (o, _) = stage("4096", "300KB");
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("does not fit in 2 stages"),
        "{}",
        stderr(&o)
    );
    // A model without state pairs has no cache to count.
    let gpt = dir.path().join("tiny_gpt.onnx");
    let o = cleave(&[
        os("partition"),
        gpt.as_os_str(),
        os("--stages"),
        os("2"),
        os("--context"),
        os("64"),
        os("--dry-run"),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("has no state pairs"), "{}", stderr(&o));
}

/// Real exports, made by Optimum (Llama with grouped-query attention, GPT-2) and by
/// onnxruntime-genai's builder (fused GroupQueryAttention, external data), random weights:
/// split into 1, 2 and 4 stages of whole layers, each part checked, and decoded on ONNX
/// Runtime to the oracle's tokens with every step's logits against the whole model's.
/// Optimum's Llama reads the past length from `Shape(past_key_values.0.key)`: each later
/// stage reads its own cache's shape instead, so no mask crosses a hop, and the bytes a hop
/// carries per token stay the same as the context grows.
#[test]
fn exported_decoders_split_at_layers_and_decode_the_whole_models_tokens() {
    let work = tempfile::tempdir().unwrap();
    for (name, model) in cleave_testdata::exported_decoders() {
        // Prompts whose greedy continuations vary (a wiring bug then changes them).
        let prompt = if name == "optimum_gpt2" {
            "11,12"
        } else {
            "1,2,3"
        };
        let want = oracle(&model, prompt, 8, &[]);
        let distinct: std::collections::BTreeSet<_> = want.iter().collect();
        assert!(distinct.len() >= 4, "{name}: {want:?}");
        // The per-token bytes of the hidden state at a hop: Llama's residual stream (64
        // floats); genai's fused norm hands on its sum and its normed output (2 x 64); GPT-2's
        // token embedding also crosses, for the shape its mask reads (see the note).
        let hop = match name {
            "optimum_llama" => 256,
            "genai_llama" => 512,
            _ => 256 + 256 + 8,
        };
        for stages in [1, 2, 4] {
            let out = work.path().join(format!("{name}{stages}"));
            let c = partition(&model, stages, &out, &[]);
            ok(&cleave(&[os("check"), c.as_os_str()]));
            let record = conn(&c);
            let small = ["input_ids", "attention_mask", "position_ids"];
            for p in record["parts"].as_array().unwrap() {
                let state = p["state"].as_object().unwrap();
                assert!(
                    !state.is_empty(),
                    "{name}: a stage without a layer: {record}"
                );
                // A part takes only its own layers' caches, the small inputs and what the
                // stage before hands on.
                let handed: Vec<&str> = p["inputs"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter_map(|x| x.as_str())
                    .filter(|x| !small.contains(x) && !state.contains_key(*x))
                    .collect();
                assert!(
                    handed.iter().all(|x| !x.starts_with("past_key_values")),
                    "{name}: {handed:?}"
                );
                // GPT-2's residual stream has no declared shape (a Reshape of computed dims),
                // so the shape its mask reads comes with the embedding and the reshaped ids.
                let most = match name {
                    "optimum_llama" => 1,
                    "genai_llama" => 2,
                    _ => 3,
                };
                assert!(handed.len() <= most, "{name} {stages}: {handed:?}");
            }
            let engines = (1..=stages)
                .map(|k| format!("stage{k}=ort"))
                .collect::<Vec<_>>()
                .join(",");
            let v = ok(&cleave(&[
                os("verify"),
                model.as_os_str(),
                c.as_os_str(),
                os("--generate"),
                os("8"),
                os("--prompt-ids"),
                os(prompt),
                os("--reference"),
                os("ort"),
                os("--engine"),
                os(&engines),
                os("--json"),
            ]));
            let v: serde_json::Value = serde_json::from_str(v.trim()).unwrap();
            assert_eq!(v["passed"], true, "{name} {stages}: {v}");
            assert_eq!(tokens(&v), want, "{name} in {stages} stages");
            let hops: Vec<u64> = serde_json::from_value(v["hop_bytes_per_token"].clone()).unwrap();
            assert_eq!(hops.len(), 7);
            let crossing = hop * (stages as u64 - 1);
            assert!(
                hops.iter().all(|&h| h <= crossing && h == hops[0]),
                "{name} {stages}: {hops:?}"
            );
        }
        // Counted at a context, every stage's per-token work is known (GPT-2's computed
        // shapes fold, PyTorch's `expand` among them), so two stages take two layers each.
        let out = work.path().join(format!("{name}-ctx"));
        let o = cleave(&[
            os("partition"),
            model.as_os_str(),
            os("--stages"),
            os("2"),
            os("--context"),
            os("18"),
            os("-o"),
            out.as_os_str(),
        ]);
        ok(&o);
        let record = conn(&out.join("model.conn.json"));
        for p in record["parts"].as_array().unwrap() {
            assert_eq!(p["state"].as_object().unwrap().len(), 4, "{name}: {record}");
        }
        // A text prompt through the tokenizer.json the export wrote beside the model.
        let c = work.path().join(format!("{name}2")).join("model.conn.json");
        let words: Vec<String> = prompt.split(',').map(|t| format!("w{t}")).collect();
        let text = ok(&cleave(&[
            os("generate"),
            c.as_os_str(),
            os("--prompt"),
            os(&words.join(" ")),
            os("--max-new-tokens"),
            os("8"),
            os("--engine"),
            os("stage1=ort,stage2=ort"),
            os("--json"),
        ]));
        let text: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(tokens(&text), want, "{name} from text");
    }
}
