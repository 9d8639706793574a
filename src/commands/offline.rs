//! The commands that need neither MPI nor a run: `ops` (op count of an architecture),
//! `search-sim` (the search against a synthetic accuracy model) and `data-check` (a pack
//! through the loader).

use std::time::Instant;

use anyhow::{bail, Context};

use crate::arch::{self, Graph, Shape};
use crate::cli::{DataCheckArgs, OpsArgs, SearchSimArgs};
use crate::config::STARTS;
use crate::data::{open_split, Loader, LoaderConfig};
use crate::ops::OpCount;

/// `aiperf data-check`: verifies a pack and runs full epochs through the loader.
pub fn data_check(a: DataCheckArgs) -> anyhow::Result<()> {
    let pack = open_split(&a.data, &a.split)?;
    let h = pack.header().clone();
    let t = Instant::now();
    pack.verify()?;
    println!(
        "{}: {} {} images {}x{}x{}, {} classes, checksum ok ({:.2} s)",
        pack.path().display(),
        h.num_samples,
        h.source.dataset,
        h.channels,
        h.height,
        h.width,
        h.num_classes,
        t.elapsed().as_secs_f64()
    );
    let device = a.device.resolve(0).map_err(anyhow::Error::msg)?;
    let cfg = LoaderConfig {
        global_batch: a.batch,
        seed: a.seed,
        augment: a.augment,
        workers: a.workers,
        output: a.augment_on.output(device),
        channels_last: false,
        ..LoaderConfig::default()
    };
    println!(
        "delivering to {} ({:?} output)",
        crate::host::device_label(device),
        cfg.output
    );
    let loader = Loader::new(pack, cfg)?;
    for epoch in 0..a.epochs {
        let t = Instant::now();
        let (mut images, mut sum, mut sq) = (0usize, 0f64, 0f64);
        let mut seen = vec![false; h.num_samples as usize];
        for batch in loader.epoch(epoch) {
            let batch = batch?;
            let (x, _y) = batch.to_tensors(device)?;
            let (s, q) = moments(&x)?;
            (sum, sq) = (sum + s, sq + q);
            images += batch.len();
            for i in batch.indices {
                if std::mem::replace(&mut seen[i], true) {
                    bail!("epoch {epoch}: sample {i} delivered twice");
                }
            }
        }
        if images != h.num_samples as usize {
            bail!(
                "epoch {epoch}: delivered {images} of {} samples",
                h.num_samples
            );
        }
        let n = (images * loader.sample_shape().iter().product::<usize>()) as f64;
        let mean = sum / n;
        let secs = t.elapsed().as_secs_f64();
        println!(
            "epoch {epoch}: {images} images in {secs:.2} s ({:.0} images/s); normalised mean {mean:+.4}, std {:.4}",
            images as f64 / secs,
            (sq / n - mean * mean).max(0.0).sqrt()
        );
    }
    Ok(())
}

/// The sum and the sum of squares of a float tensor's values, in one pass over its memory
/// (the check should not be slower than the loader it checks).
fn moments(x: &tch::Tensor) -> anyhow::Result<(f64, f64)> {
    if x.device().is_cuda() {
        // On the GPU: two reductions there, two numbers back.
        let x = x.f_to_kind(tch::Kind::Double)?;
        let s = x.f_sum(tch::Kind::Double)?.f_double_value(&[])?;
        let q = x
            .f_square()?
            .f_sum(tch::Kind::Double)?
            .f_double_value(&[])?;
        return Ok((s, q));
    }
    let mut x = x.f_contiguous()?.f_to_kind(tch::Kind::Float)?;
    // SAFETY: a contiguous CPU float tensor, only read while `x` lives.
    let v: &[f32] = unsafe { crate::data::host_slice(&mut x) };
    Ok(v.chunks(4096).fold((0.0, 0.0), |(s, q), c| {
        let (cs, cq) = c.iter().fold((0f32, 0f32), |(s, q), &x| (s + x, q + x * x));
        (s + f64::from(cs), q + f64::from(cq))
    }))
}

/// `aiperf search-sim`: the search and TPE against a synthetic accuracy model.
pub fn search_sim(a: SearchSimArgs) -> anyhow::Result<()> {
    use crate::search::{sim, BayesConfig, BayesOptimizer, Space, Tpe, TpeConfig};
    let Some(start) = arch::by_name(&a.start, a.input, a.classes) else {
        bail!("--start {:?}: use one of {}", a.start, STARTS.join(", "));
    };
    OpCount::of(&start)
        .with_context(|| format!("--start {} does not fit --input {}", a.start, a.input))?;
    let cfg = BayesConfig {
        threads: a.threads,
        seed: a.seed,
        ..BayesConfig::default()
    };
    let optimizer = BayesOptimizer::new(cfg).map_err(anyhow::Error::msg)?;
    let mut tpe = Tpe::new(
        TpeConfig {
            seed: a.seed,
            ..TpeConfig::default()
        },
        Space::default(),
    )
    .map_err(anyhow::Error::msg)?;
    if !a.json {
        println!(
            "{:>5} {:>6} {:>5} {:>4} {:>15} {:>8} {:>10} {:>11} {:>9}  morphisms",
            "trial",
            "father",
            "batch",
            "k",
            "predicted",
            "accuracy",
            "GFLOP/img",
            "params",
            "search s"
        );
    }
    let trials = sim::simulate(&start, a.trials, &optimizer, &mut tpe, a.seed, |t| {
        if a.json {
            println!("{}", serde_json::to_string(t).expect("trial serialises"));
            return;
        }
        let predicted = t
            .predicted
            .map_or("-".into(), |(m, s)| format!("{m:.4}±{s:.4}"));
        println!(
            "{:>5} {:>6} {:>5} {:>4} {:>15} {:>8.4} {:>10.3} {:>11} {:>9.3}  {}",
            t.trial,
            t.father.map_or("-".into(), |f| f.to_string()),
            t.hparams.batch_size,
            t.hparams.kernel_size,
            predicted,
            t.accuracy,
            t.fp_per_image as f64 / 1e9,
            crate::ops::group_digits(t.params.into()),
            t.generate_s,
            sim::describe(&t.morphisms)
        );
    });
    if !a.json {
        let best = trials
            .iter()
            .max_by(|x, y| x.accuracy.total_cmp(&y.accuracy))
            .expect("at least one trial");
        let search_s: f64 = trials.iter().map(|t| t.generate_s).sum();
        println!(
            "best: trial {} accuracy {:.4}; {} trials, {:.3} s in the search ({} thread(s))",
            best.trial,
            best.accuracy,
            trials.len(),
            search_s,
            a.threads
        );
    }
    Ok(())
}

/// The architecture `aiperf ops` was asked about.
fn ops_graph(a: &OpsArgs) -> anyhow::Result<Graph> {
    let input = a.input.unwrap_or(Shape::new(3, 224, 224));
    let classes = a.classes.unwrap_or(1000);
    if classes == 0 {
        bail!("--classes must be at least 1");
    }
    if let Some(g) = arch::by_name(&a.arch, input, classes) {
        return Ok(g);
    }
    let path = std::path::Path::new(&a.arch);
    if !path.is_file() {
        bail!(
            "--arch {:?}: neither a built-in architecture ({}) nor a file",
            a.arch,
            STARTS.join(", ")
        );
    }
    if a.input.is_some() || a.classes.is_some() {
        bail!(
            "--arch {}: an architecture file fixes its input and classes; drop --input/--classes",
            a.arch
        );
    }
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Graph::from_json(&text)
        .with_context(|| format!("{} is not a valid architecture", path.display()))
}

/// `aiperf ops`: the op count of an architecture, per layer.
pub fn ops(a: OpsArgs) -> anyhow::Result<()> {
    let graph = ops_graph(&a)?;
    let count = OpCount::of(&graph)?;
    if a.json {
        let out = serde_json::json!({
            "input": graph.input_shape(),
            "classes": graph.num_classes(),
            "params": count.params,
            "fp_per_image": count.fp_per_image,
            "bp_per_image": count.bp_per_image,
            "train_per_image": count.train_per_image(),
            "update_per_step": count.update_per_step(),
            "softmax_fp": count.softmax_fp,
            "layers": count.layers,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        print!("{}", count.table());
    }
    Ok(())
}
