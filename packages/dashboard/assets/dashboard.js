// skiplock dashboard: the only script, served from the package (no CDN, no framework).
// - Live: every few seconds (body[data-live-ms]) the page is fetched again and each element with
//   a data-live attribute is replaced by its new version, so counts and an open detail page
//   update without a reload. Forms are outside those elements, so typing is never disturbed.
// - Forms with data-confirm (and buttons with it) ask before they are sent.
// - A checkbox with data-select-all selects every row's checkbox in its form.
(function () {
  'use strict';

  function confirmations(root) {
    root.querySelectorAll('form[data-confirm]').forEach(function (form) {
      if (form.dataset.confirmBound) return;
      form.dataset.confirmBound = '1';
      form.addEventListener('submit', function (event) {
        if (!window.confirm(form.dataset.confirm)) event.preventDefault();
      });
    });
    root.querySelectorAll('button[data-confirm]').forEach(function (button) {
      if (button.dataset.confirmBound) return;
      button.dataset.confirmBound = '1';
      button.addEventListener('click', function (event) {
        if (!window.confirm(button.dataset.confirm)) event.preventDefault();
      });
    });
    root.querySelectorAll('input[data-select-all]').forEach(function (all) {
      if (all.dataset.selectBound) return;
      all.dataset.selectBound = '1';
      all.addEventListener('change', function () {
        var form = all.closest('form');
        if (!form) return;
        form.querySelectorAll('input[type=checkbox][name=id]').forEach(function (box) {
          box.checked = all.checked;
        });
      });
    });
  }

  function checkedIds(region) {
    var ids = {};
    region.querySelectorAll('input[type=checkbox][name=id]:checked').forEach(function (box) {
      ids[box.value] = true;
    });
    return ids;
  }

  var busy = false;
  function refresh() {
    if (busy || document.visibilityState === 'hidden') return;
    var regions = document.querySelectorAll('[data-live]');
    if (regions.length === 0) return;
    busy = true;
    fetch(window.location.href, {
      headers: { 'x-skiplock-live': '1' },
      credentials: 'same-origin',
      cache: 'no-store',
    })
      .then(function (response) {
        return response.ok ? response.text() : null;
      })
      .then(function (text) {
        if (text === null) return;
        var next = new DOMParser().parseFromString(text, 'text/html');
        regions.forEach(function (region) {
          var fresh = next.querySelector('[data-live="' + region.dataset.live + '"]');
          if (!fresh || fresh.innerHTML === region.innerHTML) return;
          // Keep what the operator ticked in a list being replaced.
          var ticked = checkedIds(region);
          if (region.contains(document.activeElement) && document.activeElement !== document.body) {
            return; // someone is using a control in it: leave it until they are done
          }
          region.innerHTML = fresh.innerHTML;
          region.querySelectorAll('input[type=checkbox][name=id]').forEach(function (box) {
            if (ticked[box.value]) box.checked = true;
          });
          confirmations(region);
        });
        document.body.dataset.refreshedAt = String(Date.now());
      })
      .catch(function () {
        // The server is away for a moment: the next tick tries again.
      })
      .then(function () {
        busy = false;
      });
  }

  document.addEventListener('DOMContentLoaded', function () {
    confirmations(document);
    var ms = Number(document.body.dataset.liveMs || '0');
    if (ms > 0) window.setInterval(refresh, ms);
  });
})();
