// The main window's Help menu dialogs (see main_window.h): the keyboard shortcuts and About.
#include <QMessageBox>

#include "app/main_window.h"

namespace hl::app {

void MainWindow::showShortcuts() {
  const QString text =
      tr("<table>"
         "<tr><td><b>F10</b>, Ctrl+→</td><td>Step one token</td></tr>"
         "<tr><td><b>F8</b></td><td>Run N tokens</td></tr>"
         "<tr><td><b>F5</b></td><td>Run to the end</td></tr>"
         "<tr><td><b>Esc</b>, Shift+F5</td><td>Stop</td></tr>"
         "<tr><td><b>Ctrl+R</b></td><td>Reset: a new run A from the prompt</td></tr>"
         "<tr><td><b>Alt+←</b>, Ctrl+←</td><td>Previous token (scrub)</td></tr>"
         "<tr><td><b>Alt+→</b></td><td>Next token</td></tr>"
         "<tr><td><b>Ctrl+Home</b> / <b>Ctrl+End</b></td><td>First token / follow the latest</td></tr>"
         "<tr><td><b>Ctrl+D</b></td><td>Show B − A</td></tr>"
         "<tr><td><b>Ctrl+O</b> / <b>Ctrl+Shift+O</b></td><td>Open checkpoint / session</td></tr>"
         "<tr><td><b>Ctrl+S</b> / <b>Ctrl+Shift+S</b></td><td>Save session / as</td></tr>"
         "<tr><td><b>Ctrl+E</b></td><td>Export all figures</td></tr>"
         "</table><p>Click a token in the strip, or a point on a token axis, to scrub every view to it; "
         "click a layer to select it in every view.</p>");
  auto* box = new QMessageBox(QMessageBox::Information, tr("Keyboard shortcuts"), text, QMessageBox::Ok, this);
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->open();
}

void MainWindow::showAbout() {
  QMessageBox::about(this, tr("About HybridLens"),
                     tr("<b>HybridLens %1</b><p>Runs hybrid SSM–Transformer language models (Jamba, Bamba, "
                        "Nemotron-H, Granite 4.0-H, Falcon-H1) and shows instruments inside them, token by "
                        "token.</p><p>Licensed under the GNU GPL, "
                        "version 3 or later. Plots use QCustomPlot (GPL-3.0).</p>")
                         .arg(QStringLiteral(HL_VERSION)));
}

}  // namespace hl::app
