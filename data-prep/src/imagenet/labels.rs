//! The label files of the ImageNet conversion: `--val-labels` (`<image> <wnid>` lines, or
//! Kaggle's `LOC_val_solution.csv`) and `--synsets` (`<wnid> <name>` lines). A labels file
//! that gives one image two classes, or that contradicts the class folder an image is in, is
//! refused: either way some image would be counted in a class it may not belong to.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::error::{PrepError, Result};

/// Reads `<image> <wnid>` lines into a map from image name (without extension) to wnid.
/// Accepts Kaggle's `LOC_val_solution.csv` (header line, the wnid as the first word of the
/// second column) and plain two-column text. An image listed twice with the same class is
/// fine; with two different classes it is an error naming both lines.
pub fn read_val_labels(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(path).map_err(|e| PrepError::io(path, e))?;
    let mut labels: BTreeMap<String, (String, usize)> = BTreeMap::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (no == 0 && line.starts_with("ImageId")) {
            continue;
        }
        let mut fields = line
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|f| !f.is_empty());
        let (Some(image), Some(wnid)) = (fields.next(), fields.next()) else {
            return Err(PrepError::format(
                path,
                format!("line {}: expected '<image> <wnid>', found {line:?}", no + 1),
            ));
        };
        let stem = Path::new(image)
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        match labels.get(&stem) {
            Some((first, first_line)) if first != wnid => {
                return Err(PrepError::format(
                    path,
                    format!(
                        "image {stem} is given two classes, {first} (line {first_line}) and {wnid} (line {}); keep one line per image, with its right class",
                        no + 1
                    ),
                ));
            }
            Some(_) => {}
            None => {
                labels.insert(stem, (wnid.to_string(), no + 1));
            }
        }
    }
    Ok(labels.into_iter().map(|(k, (w, _))| (k, w)).collect())
}

/// Checks a `--val-labels` file (`labels`, read from `labels_path`) against the validation
/// class folders (`folders`: wnid → images): an image the file lists must be in the folder
/// of the class the file gives it. Images the file does not list are fine.
pub fn check_val_folders(
    labels_path: &Path,
    labels: &BTreeMap<String, String>,
    folders: &BTreeMap<String, Vec<PathBuf>>,
) -> Result<()> {
    for (wnid, images) in folders {
        for image in images {
            let stem = image.file_stem().unwrap_or_default().to_string_lossy();
            match labels.get(stem.as_ref()) {
                Some(listed) if listed != wnid => {
                    return Err(PrepError::format(
                        labels_path,
                        format!(
                            "image {stem} is in the class folder {wnid} ({}) but this file gives it class {listed}; correct the file or move the image, or leave --val-labels out to label by folder",
                            image.display()
                        ),
                    ));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Reads `<wnid> <readable name>` lines into a map.
pub fn read_synsets(path: &Path) -> Result<BTreeMap<String, String>> {
    let text = fs::read_to_string(path).map_err(|e| PrepError::io(path, e))?;
    Ok(text
        .lines()
        .filter_map(|l| {
            let (wnid, name) = l.trim().split_once(char::is_whitespace)?;
            Some((wnid.to_string(), name.trim().to_string()))
        })
        .collect())
}
