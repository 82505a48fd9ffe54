//! The views of a partition (`partition --report`, `report`), checked by independent renderers:
//! Graphviz's `dot` must lay out the DOT file, and headless Chromium must load the HTML report
//! without a console error and find one box per part. CI installs both (.ci/run); a missing one
//! fails the test with the command that installs it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use cleave::workdir::ConnFile;
use cleave_testdata::light;
use common::{assert_bad_input, cleave, ok, os};

const INSTALL: &str = "install it with `apt-get install -y chromium graphviz` (as .ci/run does)";

fn tool(name: &str) -> PathBuf {
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(name))
        .find(|p| p.is_file());
    found.unwrap_or_else(|| panic!("`{name}` not found on PATH: {INSTALL}"))
}

/// What the injected probe saw after the page loaded.
#[derive(Debug, serde::Deserialize)]
struct Probe {
    errors: Vec<String>,
    boxes: usize,
    clusters: usize,
    nodes: usize,
    tables: usize,
    /// Rendered rectangles `[x, y, width, height]` of the part graph's boxes (parts and model
    /// inputs/outputs), of its edge labels, and of the node graph's node boxes.
    #[serde(default)]
    part_rects: Vec<[f64; 4]>,
    #[serde(default)]
    label_rects: Vec<[f64; 4]>,
    #[serde(default)]
    node_rects: Vec<[f64; 4]>,
    /// The `<title>` of each drawn boundary edge (it lists the tensors the edge carries).
    #[serde(default)]
    edge_titles: Vec<String>,
}

/// Pairs of rectangles that overlap by more than half a pixel each way.
fn overlapping(a: &[[f64; 4]], b: &[[f64; 4]], same: bool) -> usize {
    let hit = |p: &[f64; 4], q: &[f64; 4]| {
        p[0] + p[2] - 0.5 > q[0]
            && q[0] + q[2] - 0.5 > p[0]
            && p[1] + p[3] - 0.5 > q[1]
            && q[1] + q[3] - 0.5 > p[1]
    };
    let mut n = 0;
    for (i, p) in a.iter().enumerate() {
        for (j, q) in b.iter().enumerate() {
            if (!same || j > i) && hit(p, q) {
                n += 1;
            }
        }
    }
    n
}

/// Overlaps in the rendered part graph and node graph: (box–box, label–label, label–box,
/// node–node).
fn overlaps(p: &Probe) -> (usize, usize, usize, usize) {
    (
        overlapping(&p.part_rects, &p.part_rects, true),
        overlapping(&p.label_rects, &p.label_rects, true),
        overlapping(&p.label_rects, &p.part_rects, false),
        overlapping(&p.node_rects, &p.node_rects, true),
    )
}

/// Loads `html` in headless Chromium with a probe script placed first in `<head>`: it records
/// uncaught errors and console.error calls, and after `load` writes what it counted into the
/// DOM, which `--dump-dom` prints. Console messages logged on stderr are checked too.
fn chromium_probe(html: &str, dir: &Path) -> Probe {
    const PROBE: &str = r#"<script>
window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
(function () { var ce = console.error; console.error = function () { window.__errors.push(Array.prototype.join.call(arguments, ' ')); ce.apply(console, arguments); }; })();
window.addEventListener('load', function () {
  var q = function (s) { return document.querySelectorAll(s).length; };
  var out = document.createElement('pre');
  out.id = 'cleave-probe';
  document.querySelectorAll('details').forEach(function (d) { d.open = true; });
  var rects = function (s) { return Array.prototype.map.call(document.querySelectorAll(s), function (e) { var r = e.getBoundingClientRect(); return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; }); };
  var titles = Array.prototype.map.call(document.querySelectorAll('#part-graph svg .part-edge'), function (e) { var t = e.querySelector('title'); return t ? t.textContent : ''; });
  out.textContent = JSON.stringify({ errors: window.__errors, boxes: q('#part-graph svg .part-box'), clusters: q('#node-graph svg .cluster'), nodes: q('#node-graph svg .node'), tables: q('#parts article.part'),
    part_rects: rects('#part-graph svg .part-box rect, #part-graph svg .io-box rect'), label_rects: rects('#part-graph svg .edge-label'), node_rects: rects('#node-graph svg .node rect'), edge_titles: titles });
  document.body.appendChild(out);
});
</script>"#;
    let at = html.find("<head>").expect("the page has a <head>") + "<head>".len();
    let page = dir.join("probe.html");
    std::fs::write(&page, format!("{}{PROBE}{}", &html[..at], &html[at..])).unwrap();
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(tool("chromium"))
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&out.stdout);
    let log = String::from_utf8_lossy(&out.stderr);
    const MARK: &str = "<pre id=\"cleave-probe\">";
    let start = dom.find(MARK).unwrap_or_else(|| {
        panic!(
            "the probe did not run (exit {:?}): {log}",
            out.status.code()
        )
    }) + MARK.len();
    let end = dom[start..].find("</pre>").unwrap() + start;
    let json = dom[start..end]
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let mut probe: Probe = serde_json::from_str(&json).unwrap();
    probe.errors.extend(
        log.lines()
            .filter(|l| l.contains("CONSOLE") && (l.contains("Uncaught") || l.contains("Error")))
            .map(String::from),
    );
    probe
}

fn dot_clusters(dot_file: &Path) -> usize {
    let out = Command::new(tool("dot"))
        .arg("-Tsvg")
        .arg(dot_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "dot -Tsvg {} failed: {}",
        dot_file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .matches("class=\"cluster\"")
        .count()
}

struct Views {
    conn: ConnFile,
    md: String,
    dot: PathBuf,
    html: String,
    stdout: String,
}

fn partition_with_report(model: &Path, work: &Path, devices: &[&str]) -> Views {
    let mut args = vec![os("partition"), model.as_os_str()];
    args.extend(devices.iter().map(os));
    args.extend([os("-o"), work.as_os_str(), os("--report")]);
    let stdout = ok(&cleave(&args));
    let stem = model.file_stem().unwrap().to_string_lossy().into_owned();
    let read = |ext: &str| std::fs::read_to_string(work.join(format!("{stem}.{ext}"))).unwrap();
    Views {
        conn: ConnFile::from_json(&read("conn.json")).unwrap(),
        md: read("partition.md"),
        dot: work.join(format!("{stem}.dot")),
        html: read("report.html"),
        stdout,
    }
}

fn placed(stdout: &str) -> usize {
    let at = stdout.find(" nodes placed").unwrap();
    stdout[..at].rsplit('(').next().unwrap().parse().unwrap()
}

/// Every renderer agrees with the partition: one box, table and cluster per part, one SVG box
/// per placed node, no console error; `report` from the written files gives the same views.
fn check_views(v: &Views, work: &Path, stem: &str, devices: usize) {
    let parts = v.conn.parts.len();
    let nodes = placed(&v.stdout);
    let backends: std::collections::BTreeSet<_> = v
        .conn
        .parts
        .iter()
        .map(|p| p.backend.clone().unwrap())
        .collect();
    assert_eq!(backends.len(), devices, "{:?}", v.conn.parts);
    assert!(
        v.stdout.contains(&format!("report: {parts} parts")),
        "{}",
        v.stdout
    );

    let mermaid_parts = if nodes > 300 {
        v.md.lines()
            .filter(|l| l.starts_with("    p") && !l.contains("-->"))
            .count()
    } else {
        v.md.matches("\n    subgraph p").count()
    };
    assert_eq!(mermaid_parts, parts, "{}", v.md);
    assert_eq!(v.md.matches("\nclassDef dev_").count(), devices);
    assert_eq!(
        dot_clusters(&v.dot),
        parts,
        "dot draws one cluster per part"
    );

    let probe = chromium_probe(&v.html, work);
    assert!(
        probe.errors.is_empty(),
        "console errors: {:?}",
        probe.errors
    );
    assert_eq!(
        (probe.boxes, probe.tables, probe.clusters, probe.nodes),
        (parts, parts, parts, nodes),
        "{probe:?}"
    );

    let conn_json = work.join(format!("{stem}.conn.json"));
    let html_before = v.html.clone();
    std::fs::remove_file(work.join(format!("{stem}.report.html"))).unwrap();
    let out = ok(&cleave(&[os("report"), conn_json.as_os_str()]));
    assert!(out.contains(&format!("report: {parts} parts")), "{out}");
    let html_after = std::fs::read_to_string(work.join(format!("{stem}.report.html"))).unwrap();
    let first_difference = html_after
        .bytes()
        .zip(html_before.bytes())
        .position(|(a, b)| a != b);
    assert!(html_after == html_before, "report from the written files differs from partition --report from byte {first_difference:?}");
}

#[test]
fn resnet50_on_two_devices() {
    let tmp = tempfile::tempdir().unwrap();
    // myriad runs every op of resnet50: pooling and the classifier go to the CPU by rule.
    let part = tmp.path().join("two.part");
    std::fs::write(&part, "[partition]\nbackends=myriad,cpu\ndefault=myriad\ncomply=opcode\n\n[OPCODE]\nMaxPool=cpu\nAveragePool=cpu\nReshape=cpu\nGemm=cpu\nSoftmax=cpu\n").unwrap();
    let work = tmp.path().join("out");
    let v = partition_with_report(
        &light("light_resnet50"),
        &work,
        &["--rules", part.to_str().unwrap()],
    );
    check_views(&v, &work, "light_resnet50", 2);
}

#[test]
fn densenet121_on_three_devices() {
    let tmp = tempfile::tempdir().unwrap();
    let part = tmp.path().join("three.part");
    std::fs::write(&part, "[partition]\nbackends=npu,gpu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nMaxPool=cpu\nAveragePool=gpu\nGlobalAveragePool=gpu\n").unwrap();
    let work = tmp.path().join("out");
    let v = partition_with_report(
        &light("light_densenet121"),
        &work,
        &["--rules", part.to_str().unwrap()],
    );
    check_views(&v, &work, "light_densenet121", 3);
}

/// The probe can fail: a script error, or a missing part box, is seen.
#[test]
fn the_chromium_probe_sees_errors_and_missing_boxes() {
    let tmp = tempfile::tempdir().unwrap();
    let v = partition_with_report(
        &common::example("tiny_cnn.onnx"),
        tmp.path(),
        &[
            "--rules",
            common::example("tiny_cnn.part").to_str().unwrap(),
        ],
    );
    let parts = v.conn.parts.len();
    let clean = chromium_probe(&v.html, tmp.path());
    assert!(clean.errors.is_empty() && clean.boxes == parts, "{clean:?}");

    let broken = v
        .html
        .replace("</main>", "</main><script>undefinedFunction();</script>");
    assert!(!chromium_probe(&broken, tmp.path()).errors.is_empty());
    let one_less = v
        .html
        .replacen("<g class=\"part-box\"", "<g class=\"gone\"", 1);
    assert_eq!(chromium_probe(&one_less, tmp.path()).boxes, parts - 1);
}

#[test]
fn report_refuses_a_missing_or_foreign_partition() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("nope.conn.json");
    assert_bad_input(
        &cleave(&[os("report"), missing.as_os_str()]),
        &missing,
        "cannot read",
    );

    partition_with_report(
        &common::example("tiny_cnn.onnx"),
        tmp.path(),
        &[
            "--rules",
            common::example("tiny_cnn.part").to_str().unwrap(),
        ],
    );
    let conn = tmp.path().join("tiny_cnn.conn.json");
    let other = light("light_squeezenet");
    let o = cleave(&[
        os("report"),
        conn.as_os_str(),
        os("--model"),
        other.as_os_str(),
    ]);
    assert_bad_input(&o, &conn, "differ from the model's");
}

/// Reads a real model's report as Chromium draws it: no two boxes overlap, no edge label
/// touches another label or a box, and every boundary tensor of the conn file is on a drawn
/// edge. Returns the overlap counts for the closing note's before/after table.
fn check_drawn_without_overlaps(model: &Path, work: &Path, args: &[&str]) {
    let v = partition_with_report(model, work, args);
    let probe = chromium_probe(&v.html, work);
    assert!(
        probe.errors.is_empty(),
        "console errors: {:?}",
        probe.errors
    );
    let parts = v.conn.parts.len();
    assert_eq!(probe.boxes, parts, "{probe:?}");
    let counts = overlaps(&probe);
    println!(
        "{}: {parts} parts, {} labels; overlaps box-box {}, label-label {}, label-box {}, node-node {}",
        model.display(),
        probe.label_rects.len(),
        counts.0,
        counts.1,
        counts.2,
        counts.3
    );
    assert_eq!(
        counts,
        (0, 0, 0, 0),
        "overlaps (box-box, label-label, label-box, node-node)"
    );
    check_model_explorer_overlay(model, work);
    for p in &v.conn.parts {
        for t in p.inputs.iter().chain(&p.outputs) {
            assert!(
                probe
                    .edge_titles
                    .iter()
                    .any(|e| e.lines().any(|l| l.starts_with(&format!("{t} (")))),
                "boundary tensor {t} is on no drawn edge"
            );
        }
    }
}

#[test]
fn a_real_detector_and_a_real_tflite_model_are_drawn_without_overlaps() {
    let tmp = tempfile::tempdir().unwrap();
    // YOLOv8n (NudeNet's 320 export): 24 parts on nnapi with the CPU as fallback.
    let yolo = cleave_testdata::dir().join("corpus/nudenet_320n.onnx");
    check_drawn_without_overlaps(
        &yolo,
        &tmp.path().join("yolo"),
        &["--devices", "nnapi,cpu", "--shape", "images=1,3,320,320"],
    );
    let face = cleave_testdata::tflite_files()
        .into_iter()
        .find(|p| p.ends_with("face_detection_full_range.tflite"))
        .expect("face_detection_full_range.tflite in the TFLite test data");
    let rules = tmp.path().join("face.part");
    std::fs::write(&rules, "[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nRESIZE_BILINEAR=cpu\nCONCATENATION=cpu\nRESHAPE=cpu\n").unwrap();
    check_drawn_without_overlaps(
        &face,
        &tmp.path().join("face"),
        &["--rules", rules.to_str().unwrap()],
    );
}

/// `scripts/oracles/check_model_explorer.py`: Model Explorer's own adapter converts the model, and each
/// node it draws in the main graph must have its result in the overlay, naming its op.
fn check_model_explorer_overlay(model: &Path, work: &Path) {
    let stem = model.file_stem().unwrap().to_string_lossy();
    let overlay = work.join(format!("{stem}.model-explorer.json"));
    let out = Command::new("python3")
        .arg(common::repo().join("scripts/oracles/check_model_explorer.py"))
        .arg(&overlay)
        .arg(model)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{}", text.trim());
}

/// An ONNX model with If: Model Explorer draws both branches inside the main graph, named after
/// the If, and the overlay colours them with the If's part.
#[test]
fn the_model_explorer_overlay_covers_if_branches() {
    let tmp = tempfile::tempdir().unwrap();
    let model = cleave_testdata::dir().join("corpus/silero_vad.onnx");
    let work = tmp.path().join("out");
    partition_with_report(&model, &work, &["--devices", "nnapi,cpu"]);
    check_model_explorer_overlay(&model, &work);
}

/// The overlap count sees overlaps.
#[test]
fn overlap_counting_sees_a_touching_pair() {
    let a = [0.0, 0.0, 10.0, 10.0];
    let b = [9.0, 9.0, 10.0, 10.0];
    let c = [20.0, 0.0, 5.0, 5.0];
    assert_eq!(overlapping(&[a, b, c], &[a, b, c], true), 1);
    assert_eq!(overlapping(&[c], &[a, b], false), 0);
}

/// `report` on a partition made with `--shape` sizes the tensors the part files fix, as
/// `partition --report` does, instead of calling them dynamic (it read the source's dynamic
/// batch back).
#[test]
fn report_of_a_fixed_shape_partition_knows_the_sizes() {
    let tmp = tempfile::tempdir().unwrap();
    let model = common::example("tiny_cnn.onnx");
    let part = common::example("tiny_cnn.part");
    let report_of = |dir: &str, shape: &[&str]| -> String {
        let out = tmp.path().join(dir);
        let mut args = vec![
            os("partition"),
            model.as_os_str(),
            os("--rules"),
            part.as_os_str(),
            os("-o"),
            out.as_os_str(),
        ];
        args.extend(shape.iter().map(os));
        ok(&cleave(&args));
        let conn = out.join("tiny_cnn.conn.json");
        ok(&cleave(&[os("report"), conn.as_os_str()]));
        std::fs::read_to_string(out.join("tiny_cnn.partition.md")).unwrap()
    };
    let dynamic = report_of("dynamic", &[]);
    assert!(dynamic.contains("dynamic"), "{dynamic}");
    let fixed = report_of("fixed", &["--shape", "input=1,3,16,16"]);
    assert!(!fixed.contains("dynamic"), "{fixed}");
}
