#include "siamese/common/mapped_archive.h"

#include <caffe2/serialize/inline_container.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <torch/csrc/jit/serialization/import_read.h>
#include <torch/csrc/jit/serialization/storage_context.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "siamese/common/error.h"

namespace siamese {

namespace {

constexpr const char* kFix = "resume from an intact checkpoint (its manifest.json hashes every file)";

struct Mapping {
  void* base = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
};

std::shared_ptr<Mapping> map_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(std::string("cannot open: ") + std::strerror(errno), path, kFix);
  struct stat st {};
  auto mapping = std::make_shared<Mapping>();
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    mapping->bytes = size_t(st.st_size);
    // Private and writable: a stray write to a tensor copies its page instead of faulting,
    // and never reaches the file.
    mapping->base = ::mmap(nullptr, mapping->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
  }
  const int mmap_errno = errno;
  ::close(fd);
  if (mapping->base == MAP_FAILED)
    throw Error(
        std::string("cannot map: ") + (mapping->bytes ? std::strerror(mmap_errno) : "the file is empty"),
        path, kFix);
  // One pass front to back: the kernel reads ahead and drops what was copied first.
  ::madvise(mapping->base, mapping->bytes, MADV_SEQUENTIAL);
  return mapping;
}

}  // namespace

MappedArchive::MappedArchive(const std::string& path) {
  auto mapping = map_file(path);
  mapping_ = mapping;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    // Every record under data/ is one storage; handing the unpickler those storages, as
    // torch.package does for storages shared between modules, keeps it from reading any.
    auto storages = std::make_shared<torch::jit::DeserializationStorageContext>();
    std::set<const c10::StorageImpl*> mapped;
    const std::string prefix = "data/";
    for (const auto& record : reader.getAllRecords()) {
      if (record.rfind(prefix, 0) != 0) continue;
      const size_t offset = reader.getRecordOffset(record), bytes = reader.getRecordSize(record);
      if (offset + bytes > mapping->bytes)
        throw Error("record " + record + " runs past the end of the file", path, kFix);
      char* data = static_cast<char*>(mapping->base) + offset;
      // The deleter's context keeps the mapping alive while any tensor views it.
      auto* keep = new std::shared_ptr<Mapping>(mapping);
      c10::DataPtr ptr(
          data, keep, [](void* ctx) { delete static_cast<std::shared_ptr<Mapping>*>(ctx); },
          c10::Device(c10::kCPU));
      c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(ptr), nullptr, false);
      mapped.insert(storage.unsafeGetStorageImpl());
      storages->addStorage(record.substr(prefix.size()), std::move(storage));
      mapped_bytes_ += int64_t(bytes);
    }
    // OutputArchive writes one object of a class without methods: its attributes arrive as
    // a dict, and a bare class of that name holds them.
    auto cu = std::make_shared<torch::jit::CompilationUnit>();
    std::map<std::string, c10::ClassTypePtr> classes;
    auto resolve = [&](const c10::QualifiedName& name) {
      auto& cls = classes[name.qualifiedName()];
      if (!cls) cls = c10::ClassType::create(name, cu);
      return c10::StrongTypePtr(cu, cls);
    };
    auto build = [&](const c10::StrongTypePtr& type, c10::IValue state) {
      auto cls = type.type_->expect<c10::ClassType>();
      const auto dict = state.toGenericDict();
      for (const auto& item : dict)
        if (!cls->hasAttribute(item.key().toStringRef()))
          cls->addAttribute(item.key().toStringRef(), item.value().type());
      auto object = c10::ivalue::Object::create(type, cls->numAttributes());
      for (const auto& item : dict) object->setAttr(item.key().toStringRef(), item.value());
      return object;
    };
    const c10::IValue top =
        torch::jit::readArchiveAndTensors("data", "", "", resolve, build, std::nullopt, reader,
                                          torch::jit::Unpickler::defaultTypeParser, storages);
    const auto object = top.toObject();
    const auto cls = object->type();
    for (size_t i = 0; i < cls->numAttributes(); ++i) {
      const c10::IValue value = object->getSlot(i);
      if (!value.isTensor()) continue;
      torch::Tensor t = value.toTensor();
      if (t.defined() && t.numel() > 0 && !mapped.count(t.storage().unsafeGetStorageImpl()))
        throw Error("tensor " + cls->getAttributeName(i) +
                        " was read into memory, not mapped: this LibTorch unpickles storages another way",
                    path, "rebuild siamese against the LibTorch it pins (scripts/quickstart.sh)");
      tensors_.emplace(cls->getAttributeName(i), std::move(t));
    }
  } catch (const c10::Error& e) {
    throw Error(std::string("not a tensor archive: ") + e.what_without_backtrace(), path, kFix);
  }
}

std::optional<torch::Tensor> MappedArchive::find(const std::string& key) const {
  const auto it = tensors_.find(key);
  if (it == tensors_.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> MappedArchive::keys() const {
  std::vector<std::string> out;
  for (const auto& [key, tensor] : tensors_) out.push_back(key);
  return out;
}

int64_t MappedArchive::mapped_bytes() const { return mapped_bytes_; }

}  // namespace siamese
