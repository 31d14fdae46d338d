// The console's only script: body views (text / JSON / hex) and confirmations.
document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll("[data-show]").forEach((link) => {
    link.addEventListener("click", (event) => {
      event.preventDefault();
      document.querySelectorAll("pre.body").forEach((pre) => { pre.hidden = pre.id !== link.dataset.show; });
    });
  });
  document.querySelectorAll("input[data-all]").forEach((box) => {
    box.addEventListener("change", () => {
      box.form.querySelectorAll(`input[name="${box.dataset.all}"]`).forEach((b) => { b.checked = box.checked; });
    });
  });
  document.querySelectorAll("form[data-confirm]").forEach((form) => {
    form.addEventListener("submit", (event) => {
      if (!window.confirm(form.dataset.confirm)) event.preventDefault();
    });
  });
});
