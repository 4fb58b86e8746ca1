# Homebrew formula for loom (distribution loom-index). Release steps: packaging/README.md.
# url, sha256 and the resource blocks are filled at release, once the tag is pushed:
#   python packaging/formula.py update
# (version from the package, the tarball's sha256 and each resource computed; or
# Homebrew's `brew update-python-resources`); do not edit them by hand.
class LoomIndex < Formula
  include Language::Python::Virtualenv

  desc "Local, searchable memory of your notes and documents, for people and LLMs"
  homepage "https://github.com/loom-index/loom"
  url "https://github.com/loom-index/loom/archive/refs/tags/v0.1.0.tar.gz"
  sha256 "0000000000000000000000000000000000000000000000000000000000000000"
  license "MIT"

  depends_on "pkgconf" => :build
  depends_on "pybind11" => :build
  depends_on "rust" => :build # pydantic-core (for the mcp SDK) builds with maturin
  depends_on "abseil"
  depends_on "python@3.13"
  depends_on "re2" # google-re2 links against Homebrew's RE2

  # pypdfium2's source build downloads a prebuilt PDFium, which Homebrew's sandbox forbids
  # and Homebrew has no PDFium to link instead; loom then extracts PDFs with pypdf.
  pypi_packages package_name:     "loom-index",
                exclude_packages: %w[pypdfium2]

  # resources: begin
  # resources: end

  def install
    virtualenv_install_with_resources
    generate_completions_from_executable(bin/"loom", shell_parameter_format: :typer)
  end

  test do
    (testpath/"notes/invoices.md").write "# Invoices\nFT-2026-0042 paid\n"
    ENV["LOOM_HOME"] = (testpath/"home").to_s
    system bin/"loom", "scan", testpath/"notes"
    assert_equal "invoices.md:2:11:FT-2026-0042 paid\n",
                 shell_output("#{bin}/loom grep 'FT-2026-[0-9]{4}'")
    assert_match version.to_s, shell_output("#{bin}/loom --version")
  end
end
