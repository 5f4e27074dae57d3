// The Help > Instruments dialog (see help_dialog.h): the Markdown page from the resources in a
// QTextBrowser, one dialog per parent window (a second request raises it).
#include "app/help_dialog.h"

#include <QDialog>
#include <QDialogButtonBox>
#include <QFile>
#include <QTextBrowser>
#include <QVBoxLayout>

namespace hl::app {

QString instrumentsHelpText() {
  QFile f(QStringLiteral(":/hybridlens/docs/instruments.md"));
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QString::fromUtf8(f.readAll());
}

QDialog* showInstrumentsHelp(QWidget* parent) {
  if (parent)
    if (auto* open = parent->findChild<QDialog*>(QStringLiteral("instrumentsHelp"), Qt::FindDirectChildrenOnly)) {
      open->raise();
      open->activateWindow();
      return open;
    }
  auto* d = new QDialog(parent);
  d->setObjectName("instrumentsHelp");
  d->setAttribute(Qt::WA_DeleteOnClose);
  d->setWindowTitle(QObject::tr("HybridLens instruments"));
  auto* layout = new QVBoxLayout(d);
  auto* browser = new QTextBrowser(d);
  browser->setObjectName("instrumentsBrowser");
  browser->setOpenExternalLinks(true);
  const QString text = instrumentsHelpText();
  browser->setMarkdown(text.isEmpty() ? QObject::tr("The instruments page is missing from this build.") : text);
  layout->addWidget(browser);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Close, d);
  QObject::connect(buttons, &QDialogButtonBox::rejected, d, &QDialog::close);
  layout->addWidget(buttons);
  d->resize(760, 640);
  d->show();
  return d;
}

}  // namespace hl::app
