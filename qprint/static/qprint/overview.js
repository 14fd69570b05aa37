// Refreshes the admin's print overview in place every data-refresh-seconds.
(function () {
  "use strict";
  const widget = document.getElementById("qprint-overview");
  if (!widget) return;
  const url = widget.dataset.url;
  const every = Math.max(1, Number(widget.dataset.refreshSeconds) || 15) * 1000;

  function el(tag, text, attrs) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    Object.entries(attrs || {}).forEach(function ([k, v]) { node.setAttribute(k, v); });
    return node;
  }

  function link(href, text) {
    const a = el("a", text);
    a.href = href;
    return a;
  }

  function when(iso) {
    return iso ? iso.slice(0, 19).replace("T", " ") : "never";
  }

  function row(cells) {
    const tr = document.createElement("tr");
    cells.forEach(function (c) { tr.appendChild(c); });
    return tr;
  }

  function fill(name, rows, empty, columns) {
    const body = widget.querySelector('table[data-table="' + name + '"] tbody');
    if (!rows.length) {
      rows = [row([el("td", empty, { colspan: columns })])];
    }
    body.replaceChildren.apply(body, rows);
  }

  function render(data) {
    ["last_hour", "last_day"].forEach(function (window) {
      data.statuses.forEach(function (status) {
        const cell = widget.querySelector('tr[data-window="' + window + '"] td[data-status="' + status + '"]');
        if (cell) cell.textContent = String(data[window][status] || 0);
      });
    });
    const oldest = widget.querySelector('[data-figure="oldest-queued"]');
    oldest.replaceChildren(data.oldest_queued
      ? link(data.oldest_queued.url, Math.round(data.oldest_queued.age_seconds) + " s")
      : document.createTextNode("-"));
    widget.querySelector('[data-figure="to-look-at"]').textContent = String(data.to_look_at_total);
    widget.querySelector('[data-figure="offline-with-queue"]').textContent = String(data.offline_with_queue_total);
    fill("to-look-at", data.to_look_at.map(function (job) {
      const title = job.title || job.id;
      const cell = el("td");
      cell.appendChild(link(job.url, title.length > 30 ? title.slice(0, 29) + "…" : title));
      return row([cell, el("td", job.device), el("td", job.status, { class: "bad" }),
        el("td", job.status_reason.slice(0, 60)), el("td", when(job.finished_at))]);
    }), "Nothing to look at.", 5);
    fill("offline-with-queue", data.offline_with_queue.map(function (device) {
      const cell = el("td");
      cell.appendChild(link(device.url, device.device));
      if (!device.enabled) cell.appendChild(document.createTextNode(" (disabled)"));
      return row([cell, el("td", device.queue_depth, { class: "num" }),
        el("td", when(device.last_seen_at))]);
    }), "None.", 3);
    widget.dataset.refreshedAt = new Date().toISOString();
  }

  function refresh() {
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(render)
      .catch(function () { widget.dataset.refreshFailed = new Date().toISOString(); })
      .finally(function () { setTimeout(refresh, every); });
  }
  setTimeout(refresh, every);
})();
