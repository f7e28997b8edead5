#pragma once
/// @file
/// @brief TensorBoard event files written from C++: scalar summaries in the
/// TFRecord framing that `tensorboard --logdir` (and torch's SummaryWriter)
/// read and write, without TensorFlow or a protobuf library.
///
/// An event file is a sequence of records, each
/// `uint64 length | uint32 masked_crc32c(length) | data | uint32 masked_crc32c(data)`
/// (little-endian), whose data is one serialized `tensorflow.Event`. The
/// first Event carries `file_version = "brain.Event:2"`; each later one a
/// Summary with one scalar Value. Only the four messages' few fields that a
/// scalar needs are encoded, by hand, in protobuf's wire format.

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

namespace titan::metrics {

namespace tb {

/// @brief CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the
/// checksum TFRecord uses; `crc` continues a previous call's result.
/// crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

/// @brief TFRecord's masked CRC: `((crc >> 15) | (crc << 17)) + 0xa282ead8`
/// of the CRC-32C of the bytes (masking keeps a CRC of data that itself
/// holds CRCs from being confused with one).
uint32_t masked_crc32c(const void* data, size_t size);

/// @brief One TFRecord: the length, its masked CRC, `data`, its masked CRC.
std::string frame_record(const std::string& data);

/// @brief A serialized Event{wall_time, step=0, file_version}: the first
/// record of every event file ("brain.Event:2").
std::string file_version_event(double wall_time, const std::string& version = "brain.Event:2");

/// @brief A serialized Event{wall_time, step, summary{value{tag, simple_value}}}.
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);

}  // namespace tb

/// @brief `<dump_folder>/<save_tb_folder>/<YYYYMMDD-HHMM>` as torchtitan names
/// a run's TensorBoard folder (an absolute save_tb_folder is used as is),
/// local time now.
std::string tensorboard_run_dir(const std::string& dump_folder, const std::string& save_tb_folder);

/// @brief Writes scalars to one event file. Not thread-safe; one per process
/// (the trainer makes one on rank 0).
class EventWriter {
 public:
  /// Creates `log_dir` and its parents, opens
  /// `events.out.tfevents.<unix time>.<host>.<pid>.0` (SummaryWriter's name)
  /// and writes the file-version record. Throws titan::Error naming the
  /// path if it cannot.
  explicit EventWriter(const std::string& log_dir);
  /// Flushes.
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  /// Appends one scalar (stored as float32, as TensorBoard's simple_value)
  /// at `step`, stamped with the wall time now.
  void add_scalar(const std::string& tag, double value, int64_t step);
  /// Pushes what was written to the file (TensorBoard reads it live).
  void flush();

  /// The event file.
  const std::string& path() const { return path_; }
  /// The folder to give `tensorboard --logdir` (or a parent of it).
  const std::string& log_dir() const { return log_dir_; }

 private:
  void write(const std::string& event);

  std::string log_dir_;
  std::string path_;
  std::ofstream out_;
};

}  // namespace titan::metrics
