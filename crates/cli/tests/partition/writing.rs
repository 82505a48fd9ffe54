//! What a partition writes: the work folder kept, writes that fail half way, external data shared or inline.

use super::*;

#[test]
fn workdir_keeps_foreign_files_and_the_source_is_untouched() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("instance_norm.onnx");
    std::fs::copy(example("instance_norm.onnx"), &src).unwrap();
    let before = std::fs::read(&src).unwrap();
    // Partition into the model's own folder, holding a user's file and a stale part.
    std::fs::write(tmp.path().join("notes.txt"), "mine").unwrap();
    std::fs::write(tmp.path().join("instance_norm.00007_cpu.onnx"), "stale").unwrap();
    let part = write_part(
        tmp.path(),
        "div.part",
        "[partition]\nbackends=cpu,acl_cl\ndefault=cpu\n[OPCODE]\nDIV=acl_cl\n",
    );
    partition(&src, tmp.path(), &["--rules", part.to_str().unwrap()]);
    assert_eq!(std::fs::read(&src).unwrap(), before);
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(
        !tmp.path().join("instance_norm.00007_cpu.onnx").exists(),
        "stale part left behind"
    );
    assert_eq!(
        conn(tmp.path(), "instance_norm").source.file,
        "instance_norm.onnx"
    );
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

/// Every file of `dir` (not folders) with its bytes.
fn files_in(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let bytes = std::fs::read(e.path()).unwrap();
            (e.file_name().to_string_lossy().into_owned(), bytes)
        })
        .collect()
}

#[test]
fn a_write_that_fails_half_way_leaves_the_previous_partition_whole() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = |op: &str| {
        write_part(
            tmp.path(),
            &format!("{op}.part"),
            &format!("[partition]\nbackends=cpu,acl_cl\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\n{op}=acl_cl\n"),
        )
    };
    let (div, add) = (rules("DIV"), rules("ADD"));
    let m = example("instance_norm.onnx");
    let work = tmp.path().join("work");
    partition(&m, &work, &["--rules", div.to_str().unwrap()]);
    // The ADD rule gives four parts: a folder stands where the fourth must go.
    for b in ["cpu", "acl_cl"] {
        std::fs::create_dir(work.join(format!("instance_norm.00004_{b}.onnx"))).unwrap();
    }
    let before = files_in(&work);
    assert_eq!(before.len(), 5, "{:?}", before.keys());
    let o = cleave(&[
        os("partition"),
        m.as_os_str(),
        os("--rules"),
        add.as_os_str(),
        os("-o"),
        work.as_os_str(),
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("instance_norm.00004_") && err.contains("a folder is in the way"),
        "{err}"
    );
    assert_eq!(files_in(&work), before, "the earlier partition was changed");
    let names: Vec<String> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        7,
        "a staging folder was left behind: {names:?}"
    );
    ok(&cleave(&[
        os("check"),
        work.join("instance_norm.conn.json").as_os_str(),
    ]));
    // Once the folders are gone the same command replaces three parts by four.
    for b in ["cpu", "acl_cl"] {
        std::fs::remove_dir(work.join(format!("instance_norm.00004_{b}.onnx"))).unwrap();
    }
    partition(&m, &work, &["--rules", add.to_str().unwrap()]);
    let after = files_in(&work);
    let c = conn(&work, "instance_norm");
    assert_eq!(c.parts.len(), 4);
    assert_eq!(after.len(), 6, "{:?}", after.keys());
    for p in &c.parts {
        assert!(after.contains_key(&p.file), "{}", p.file);
    }
}

/// Every initializer's bytes by name, read as an engine would (external data resolved).
fn weight_bytes(model: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    let m = cleave::onnx::OnnxModel::load(model).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    g.initializer
        .iter()
        .map(|t| {
            (
                t.name().to_string(),
                cleave::onnx::read_weight(&cleave::onnx::to_ir_weight(t, &m).unwrap())
                    .unwrap()
                    .to_vec(),
            )
        })
        .collect()
}

/// Initializers of a part that read external data, with their locations.
fn external_locations(part: &Path) -> Vec<(String, String)> {
    let m = cleave::onnx::OnnxModel::load(part).unwrap();
    let p = m.proto().unwrap();
    let g = p.graph.as_ref().unwrap();
    g.initializer
        .iter()
        .filter(|t| !t.external_data.is_empty())
        .map(|t| {
            (
                t.name().to_string(),
                t.external_data
                    .iter()
                    .find(|kv| kv.key() == "location")
                    .unwrap()
                    .value()
                    .to_string(),
            )
        })
        .collect()
}

/// The bundled example with every weight in one external data file, `dir/tiny_cnn.data`.
fn tiny_cnn_external(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let m = cleave::onnx::OnnxModel::load(example("tiny_cnn.onnx")).unwrap();
    let (ext, _) = m.externalized(&dir.join("tiny_cnn.data"), 0).unwrap();
    let p = dir.join("tiny_cnn.onnx");
    cleave::onnx::write_atomic(&p, &cleave::onnx::encode_model(&ext.proto().unwrap())).unwrap();
    p
}

#[test]
fn shared_weights_copy_the_sources_data_file_and_pass_the_checker_onnxruntime_and_verify() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    let want = weight_bytes(&example("tiny_cnn.onnx"));
    assert_eq!(weight_bytes(&src), want);
    let work = tmp.path().join("work");
    let rules = example("tiny_cnn.part");
    let text = partition(
        &src,
        &work,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    assert!(text.contains("tiny_cnn.weights (8 tensors, 3880 bytes), a copy of the source's data file, offsets kept"), "{text}");
    // Not a hard link: onnx's loader refuses data files with more than one link, the source's too.
    assert_eq!(
        std::fs::metadata(tmp.path().join("src/tiny_cnn.data"))
            .unwrap()
            .nlink(),
        1
    );
    assert_eq!(
        std::fs::read(work.join("tiny_cnn.weights")).unwrap(),
        std::fs::read(tmp.path().join("src/tiny_cnn.data")).unwrap()
    );

    let c = conn(&work, "tiny_cnn");
    assert!(c.parts.len() >= 2, "{c:?}");
    let mut seen = 0;
    for p in &c.parts {
        let part = work.join(&p.file);
        let got = weight_bytes(&part);
        let locations = external_locations(&part);
        assert_eq!(
            locations.len(),
            got.len(),
            "{}: every weight external",
            p.file
        );
        assert!(
            locations.iter().all(|(_, l)| l == "tiny_cnn.weights"),
            "{locations:?}"
        );
        for (name, bytes) in &got {
            assert_eq!(Some(bytes), want.get(name), "{}: {name}", p.file);
        }
        seen += got.len();
    }
    assert_eq!(seen, want.len());

    // Independent oracles: the onnx checker finds the shared file, onnxruntime runs the parts.
    let out = oracle(&work.join("tiny_cnn.conn.json"));
    assert!(out.contains("pass the onnx checker"), "{out}");
    // cleave's own engines, and the boundary probe of a source whose data is external.
    let conn_json = work.join("tiny_cnn.conn.json");
    for engines in ["npu=tract,cpu=tract", "npu=ort,cpu=ort"] {
        let o = cleave(&[
            os("verify"),
            src.as_os_str(),
            conn_json.as_os_str(),
            os("--boundaries"),
            os("--engine"),
            os(engines),
            os("--shape"),
            os("input=2,3,16,16"),
            os("--rtol"),
            os("1e-3"),
            os("--atol"),
            os("1e-4"),
        ]);
        let out = ok(&o);
        assert!(out.contains("tensors match"), "{engines}: {out}");
    }
}

#[test]
fn external_data_through_a_symbolic_link_is_refused_and_nothing_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    // The data file moves elsewhere and a link takes its place, as onnx (>= 1.16) refuses.
    let elsewhere = tmp.path().join("elsewhere.bin");
    let data = tmp.path().join("src/tiny_cnn.data");
    std::fs::rename(&data, &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &data).unwrap();
    let work = tmp.path().join("work");
    let rules = example("tiny_cnn.part");
    for cmd in ["partition", "inspect"] {
        let mut args = vec![os(cmd), src.as_os_str()];
        if cmd == "partition" {
            args.extend([os("--rules"), rules.as_os_str(), os("-o"), work.as_os_str()]);
        }
        let o = cleave(&args);
        assert_bad_input(&o, &src, "goes through a symbolic link");
        assert!(stderr(&o).contains("tiny_cnn.data"), "{}", stderr(&o));
    }
    assert!(!work.exists(), "a refused partition left its output folder");
    // The control: the same file itself in place of the link partitions.
    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&elsewhere, &data).unwrap();
    partition(&src, &work, &["--rules", rules.to_str().unwrap()]);
    assert!(work.join("tiny_cnn.conn.json").is_file());
}

#[test]
fn inline_parts_of_an_external_source_hold_their_bytes_and_drop_a_stale_shared_file() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tiny_cnn_external(&tmp.path().join("src"));
    let rules = example("tiny_cnn.part");
    let work = tmp.path().join("work");
    partition(
        &src,
        &work,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    assert!(work.join("tiny_cnn.weights").is_file());
    partition(&src, &work, &["--rules", rules.to_str().unwrap()]);
    assert!(
        !work.join("tiny_cnn.weights").exists(),
        "the shared file of the earlier run is left behind"
    );
    assert!(
        tmp.path().join("src/tiny_cnn.data").is_file(),
        "the source's data file must stay"
    );
    let want = weight_bytes(&src);
    for p in &conn(&work, "tiny_cnn").parts {
        let part = work.join(&p.file);
        assert!(external_locations(&part).is_empty(), "{}", p.file);
        for (name, bytes) in weight_bytes(&part) {
            assert_eq!(Some(&bytes), want.get(&name), "{}: {name}", p.file);
        }
    }
    oracle(&work.join("tiny_cnn.conn.json"));
}

#[test]
fn shared_weights_of_an_embedded_source_are_streamed_out() {
    let tmp = tempfile::tempdir().unwrap();
    let rules = example("tiny_cnn.part");
    let work = tmp.path().join("work");
    let text = partition(
        &example("tiny_cnn.onnx"),
        &work,
        &[
            "--rules",
            rules.to_str().unwrap(),
            "--external-data",
            "shared",
        ],
    );
    // Only conv2.w reaches 1 KiB; smaller tensors stay inside their parts.
    assert!(
        text.contains("tiny_cnn.weights (1 tensors, 2304 bytes), streamed from the source"),
        "{text}"
    );
    let want = weight_bytes(&example("tiny_cnn.onnx"));
    let mut external = Vec::new();
    for p in &conn(&work, "tiny_cnn").parts {
        let part = work.join(&p.file);
        external.extend(external_locations(&part));
        for (name, bytes) in weight_bytes(&part) {
            assert_eq!(Some(&bytes), want.get(&name), "{}: {name}", p.file);
        }
    }
    assert_eq!(
        external,
        [("conv2.w".to_string(), "tiny_cnn.weights".to_string())]
    );
    oracle(&work.join("tiny_cnn.conn.json"));
}
